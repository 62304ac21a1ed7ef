"""Run one solution: the reference process first, then the judge and the sandboxed candidate process.

1. **Reference process** (:mod:`solkit.harness.worker`, trusted problem code, forked from the fork server
   or spawned): the ground truth of every workload, saved to files the judge loads and deletes at once.
2. **Candidate process** (:mod:`solkit.harness.serve`, untrusted, contained by :mod:`.sandbox`), driven by
   :mod:`solkit.harness.judge`, which decides every verdict from its own comparisons.

==============================================  =============================================
what happened                                   status of the affected workload(s)
==============================================  =============================================
reference raised / hung / crashed the process   INVALID_REFERENCE (that workload)
import or build failed                          COMPILE_ERROR (every workload)
compile phase exceeded ``compile_timeout``      TIMEOUT (every workload)
a workload exceeded ``run_timeout``             TIMEOUT (that workload)
the candidate process died or broke the         RUNTIME_ERROR (that workload)
protocol (segfault, ``os._exit``, garbage)
a second failure of the candidate process       RUNTIME_ERROR (every remaining workload)
==============================================  =============================================
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solkit.harness.candidate import Failure
from solkit.harness.forkserver import ForkServer, child_env
from solkit.harness.judge import WorkloadJudge
from solkit.harness.process import CandidateProcess, ProcessFailure, containment_record
from solkit.harness.spawn import Spawned, adoptable, candidate_job
from solkit.harness.truth import load_ground_truth
from solkit.problems.loader import load_problem


@dataclass
class RunnerOptions:
    compile_timeout: float = 120.0
    run_timeout: float = 300.0
    startup_timeout: float = 180.0
    log_tail_chars: int = 4000
    use_fork_server: bool = True
    max_restarts: int = 1


def _tail(path: Path, n: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-n:]


def run_solution(
    job: dict[str, Any],
    options: RunnerOptions | None = None,
    spawned: Spawned | None = None,
    between=None,
    on_env=None,
    ready=None,
) -> tuple[dict, dict[str, dict]]:
    """Evaluate ``job['workloads']``; returns (environment, {uuid: result}). ``environment["timeline"]`` holds
    when each process started and was ready (epoch seconds): the overlap of the reference and the candidate.
    ``spawned``: the first candidate process, started ahead by :func:`.spawn.spawn_candidate`; ``between(env)``:
    the judge's own work, done after the reference and before the candidate runs anything (while it may still be
    starting), never beside the candidate's calls; ``on_env(env)``: called once the reference process has said
    what it runs on, while it computes the ground truth (work that ``between`` then waits for); ``ready()``: called
    before the candidate's first call, returns the seconds it waited (a suite's candidate processes started ahead,
    none of which may still be starting beside a call)."""
    options = options or RunnerOptions()
    base = Path(job.get("work_dir") or tempfile.mkdtemp(prefix="solkit_eval_"))
    ref_dirs = ground_truth_dirs(base)
    marks: dict[str, float] = {}
    # The candidate process starts (imports torch, sets up its sandbox) while the reference runs; the solution's
    # code is imported only by its "load" request, after the ground truth files are gone.
    with ThreadPoolExecutor(1) as starter:
        early = starter.submit(_first_candidate, job, base, options, marks, spawned)
        try:
            hooks = (between, on_env, ready)
            environment, results = _run_after_reference(job, options, base, ref_dirs, early, marks, hooks)
        finally:
            for d in ref_dirs:  # the run stopped before the judge loaded them: never left behind (memory, in shm)
                shutil.rmtree(d, ignore_errors=True)
            if not early.cancel() and early.exception() is None and early.result().popen.poll() is None:
                early.result().close()  # the reference left no workload to judge, or an error ended the run
            elif spawned is not None:
                spawned.discard()  # never adopted (an adopted one is closed with its CandidateProcess)
    environment["timeline"] = marks
    return environment, results


#: Where the reference process writes the ground truth first: memory, no disk I/O (files of GBs for large workloads).
SHM = Path("/dev/shm")


def ground_truth_dirs(base: Path) -> list[Path]:
    """The folders the reference process saves the ground truth to, each private (0700), in order of preference: a
    new one in SHM when it is there and writable (a file it has no room for goes on), then ``base/judge``."""
    dirs = []
    if SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK):
        _sweep_stale(SHM)
        with contextlib.suppress(OSError):  # mkdtemp: mode 0700
            dirs.append(Path(tempfile.mkdtemp(prefix=f"solkit_judge_{os.getpid()}_", dir=SHM)))
    disk = base / "judge"
    disk.mkdir(mode=0o700, parents=True, exist_ok=True)
    return [*dirs, disk]


def _sweep_stale(shm: Path) -> None:
    """Remove the ground-truth folders of judges that were killed before they could (memory until a reboot)."""
    for d in shm.glob("solkit_judge_*_*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(d.name.split("_")[2])
            if d.stat().st_uid == os.getuid() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(d, ignore_errors=True)


def _first_candidate(job, base: Path, options: RunnerOptions, marks: dict, spawned: Spawned | None):
    start = time.time()
    proc = _new_candidate(job, base, 1, options, spawned)
    adopted = spawned is not None and proc.popen is spawned.popen
    marks["candidate.spawn"] = spawned.spawned_at if adopted else start
    marks["candidate.ready"] = time.time()
    return proc


def _run_after_reference(job, options: RunnerOptions, base: Path, ref_dirs: list[Path], early: Future, marks: dict,
                         hooks):  # fmt: skip
    between, on_env, ready = hooks
    marks["reference.start"] = time.time()
    environment, ref_results = _reference(job, options, base, ref_dirs, on_env)
    marks["reference.done"] = time.time()
    server = ForkServer.current() if options.use_fork_server else None
    if server is not None:
        marks["forkserver.spawn"], marks["forkserver.ready"] = server.spawned_at, server.ready_at
    prepared: dict[str, dict] = {}
    results: dict[str, dict] = {}
    ref_s: dict[str, dict[str, float | None]] = {}
    for uuid, res in ref_results.items():
        if res.get("elapsed_s") is not None:  # the reference's own timing is timed work: a phase of its own
            timed = float(res["timing_s"]) if isinstance(res.get("timing_s"), (int, float)) else None
            ref_s[uuid] = {"reference": max(float(res["elapsed_s"]) - (timed or 0.0), 0.0), "reference_timing": timed}
            if isinstance(res.get("parts_s"), dict):
                ref_s[uuid]["reference_parts"] = res["parts_s"]
        if res.get("status") == "PREPARED":  # a file in SHM is mapped, not copied: memory already, kept once unlinked
            in_shm = Path(res["file"]).parent.parent == SHM
            prepared[uuid] = load_ground_truth(res["file"], mmap=in_shm)
        else:
            results[uuid] = res
    for d in ref_dirs:  # the ground truth now lives in this process only
        shutil.rmtree(d, ignore_errors=True)
    phases = environment.setdefault("phases", {})
    if between is not None:
        between(environment)
        marks["judge.between"] = time.time()
    results.update(run_candidate(job, prepared, options, base, phases, early, ready))
    marks["candidate.done"] = time.time()
    for uuid, res in results.items():
        res.setdefault("phases", {}).update(ref_s.get(uuid) or {"reference": None})
    return environment, results


def _new_candidate(
    job: dict[str, Any], base: Path, n: int, options: RunnerOptions, spawned: Spawned | None = None
) -> CandidateProcess:
    """The ``n``-th candidate process of this run, started and ready (its solution not yet loaded); ``spawned``, one
    started ahead (:mod:`.spawn`), is adopted only if it started from this very job, else discarded."""
    cjob, scratch = candidate_job(job, base, n)
    if spawned is not None and not adoptable(spawned, cjob, scratch, job.get("sandbox_plan") or {}):
        spawned.discard()
        spawned = None
    if spawned is not None:
        spawned.adopted = True
    return CandidateProcess(cjob, scratch, job.get("sandbox_plan") or {}, options.startup_timeout, spawned)


def _reference(job: dict[str, Any], options: RunnerOptions, base: Path, ref_dirs: list[Path], on_env=None):
    remaining = list(job["workloads"])
    results: dict[str, dict] = {}
    environment: dict[str, Any] = {}
    attempt = 0
    while remaining:
        attempt += 1
        work = base / f"attempt{attempt}"
        work.mkdir(parents=True, exist_ok=True)
        job_path = work / "job.json"
        job_path.write_text(json.dumps({**job, "workloads": remaining, "work_dir": str(work),
                                        "ref_dirs": [str(d) for d in ref_dirs]}))  # fmt: skip
        job_path.chmod(0o600)
        log_path = work / "worker.log"
        env_out, settled = _attempt(job_path, log_path, remaining, options, on_env if attempt == 1 else None)
        environment = environment or env_out
        for uuid, res in settled.items():
            results[uuid] = res
        remaining = [u for u in remaining if u not in results]
    return environment, results


class _Proc:
    """A worker process: spawned (a child of ours) or forked by the fork server (not our child)."""

    def __init__(self, popen: subprocess.Popen | None = None, pid: int | None = None) -> None:
        self.popen, self.pid = popen, popen.pid if popen else pid

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover
            return True

    def returncode(self) -> int | None:
        return self.popen.returncode if self.popen is not None else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # a process that ignores SIGKILL
                self.popen.wait(timeout=10)
        else:
            for _ in range(100):
                if not self.alive():
                    break
                time.sleep(0.05)

    def finish(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while self.alive() and time.monotonic() < end:
            time.sleep(0.02)
        if self.alive():
            self.kill()


def _start(job_path: Path, log_path: Path, use_fork_server: bool, device: str) -> tuple[_Proc, int]:
    """Start a worker; returns it and the fd we read its events from."""
    server = ForkServer.get(device) if use_fork_server else None
    if server is not None:
        fifo = job_path.parent / "events.fifo"
        os.mkfifo(fifo)
        read_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # RDWR: never blocks, never sees a spurious EOF
        try:
            return _Proc(pid=server.start(job_path, fifo, log_path)), read_fd
        except Exception:  # noqa: BLE001 - server died: spawn instead
            os.close(read_fd)
    read_fd, write_fd = os.pipe()
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            [sys.executable, "-m", "solkit.harness.worker", str(job_path), str(write_fd)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            env=child_env(),
            start_new_session=True,  # its own process group: a kill takes the candidate's children too
        )
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return _Proc(popen=popen), read_fd


def _attempt(job_path: Path, log_path: Path, remaining: list[str], options: RunnerOptions, on_env=None):
    # Long on purpose: one event loop over the worker's pipe whose phases share the deadline and partial results.
    started = time.perf_counter()
    proc, read_fd = _start(job_path, log_path, options.use_fork_server, json.loads(job_path.read_text())["device"])
    environment: dict[str, Any] = {}
    since = started
    settled: dict[str, dict] = {}
    phase, current = "startup", None
    deadline = time.monotonic() + options.startup_timeout
    buf = b""
    ended = None  # "died" | "timeout" | "done"

    def drain() -> bool:
        nonlocal buf
        got = False
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except BlockingIOError:
                return got
            if not chunk:
                return got
            buf += chunk
            got = True

    try:
        while ended is None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                ended = "timeout"
                break
            ready, _, _ = select.select([read_fd], [], [], min(wait, 0.5))
            got = drain() if ready else False
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                ev = msg.get("event")
                if ev == "env":
                    environment = msg.get("environment") or {}
                    environment["phases"] = {"startup": time.perf_counter() - started}
                    phase = "reference"
                    if on_env is not None:
                        on_env(dict(environment))
                    deadline = time.monotonic() + options.run_timeout
                elif ev == "phase":
                    phase, current = msg.get("phase"), msg.get("uuid")
                    deadline = time.monotonic() + options.run_timeout
                    since = time.perf_counter()
                elif ev == "result" and msg.get("uuid") in remaining:
                    settled[msg["uuid"]] = {**msg, "elapsed_s": time.perf_counter() - since}
                elif ev == "done":
                    ended = "done"
            if ended is None and not got and not proc.alive():
                drain()
                if b"\n" not in buf:
                    ended = "died"
    finally:
        os.close(read_fd)
    if ended == "done":
        proc.finish()
        return environment, settled
    proc.kill()
    tail = _tail(log_path, options.log_tail_chars)
    rc = proc.returncode()
    how = (
        "timed out" if ended == "timeout" else "worker process died" + (f" (exit code {rc})" if rc is not None else "")
    )
    unsettled = [u for u in remaining if u not in settled]
    if not unsettled:
        return environment, settled
    if phase in ("startup", "compile"):
        status = "TIMEOUT" if ended == "timeout" else ("COMPILE_ERROR" if phase == "compile" else "RUNTIME_ERROR")
        label = "compile phase" if phase == "compile" else "worker start-up"
        for u in unsettled:
            settled[u] = {"uuid": u, "status": status, "log": f"{label} {how}\n{tail}"}
    else:
        victim = current if current in unsettled else unsettled[0]
        if phase == "reference":
            status, what = "INVALID_REFERENCE", "reference"
        else:
            status = "TIMEOUT" if ended == "timeout" else "RUNTIME_ERROR"
            what = "candidate"
        settled[victim] = {"uuid": victim, "status": status, "log": f"{what} {how}\n{tail}"}
    return environment, settled


def _context(job: dict[str, Any]) -> dict[str, Any]:
    """What the judge needs of the problem: output names, dtypes and shapes, mutable inputs, timing knobs."""
    problem = load_problem(job["problem"], job.get("workload_file"))
    hints = problem.definition.solkit
    keys = ("reps", "timing_trials", "warmup", "method", "cpu_timing_budget_s", "gpu_timing_budget_s", "min_reps",
            "l2_flush", "prewarm_s", "cooldown_ms")  # fmt: skip
    return {
        "out_names": list(problem.definition.outputs),
        "out_dtypes": problem.output_dtypes(),
        "out_shapes": {w.uuid: problem.output_shapes(w) for w in problem.workloads if w.uuid in set(job["workloads"])},
        "workloads": {w.uuid: w for w in problem.workloads},
        "dps": bool(job["solution"]["spec"].get("destination_passing_style", True)),
        "mutable": list(hints.mutated_inputs) if hints else [],
        "timing_params": {k: job.get(k) for k in keys},
    }


def _fail(uuid: str, status: str, log: str) -> dict[str, Any]:
    return {"uuid": uuid, "status": status, "log": log}


def _how(exc: ProcessFailure) -> str:
    if exc.kind == "timeout":
        return "timed out"
    if exc.kind == "died":
        return f"worker process died ({exc.detail})"
    return f"broke the protocol ({exc.detail})"


def run_candidate(
    job: dict[str, Any],
    prepared: dict[str, dict],
    options: RunnerOptions,
    base: Path,
    phases: dict | None = None,
    early: Future | None = None,
    ready=None,
) -> dict:
    # Long on purpose: the candidate process's life (start, load, workloads, one restart) in the order it runs.
    order = [u for u in job["workloads"] if u in prepared]
    if not order:
        return {}
    ctx = _context(job)
    plan = job.get("sandbox_plan") or {}
    phases = phases if phases is not None else {}
    results: dict[str, dict] = {}
    proc: CandidateProcess | None = None
    failures, stragglers, hello, started, frozen = 0, 0, None, 0, 0
    i = 0
    while i < len(order):
        uuid = order[i]
        if proc is None:
            started += 1
            try:
                t0 = time.perf_counter()
                if started == 1 and early is not None:
                    proc = early.result()  # started while the reference ran: only the wait left is counted
                else:
                    proc = _new_candidate(job, base, started, options)
                hello = proc.hello
                t1 = time.perf_counter()
                reply = proc.request("load", options.compile_timeout)
                phases["startup"] = phases.get("startup", 0.0) + t1 - t0  # the reference's, then the candidate's
                phases["compile"] = phases.get("compile", 0.0) + time.perf_counter() - t1
            except ProcessFailure as exc:
                tail = proc.log_tail(options.log_tail_chars) if proc else ""
                stragglers += proc.close() if proc else 0
                status = "TIMEOUT" if exc.kind == "timeout" else "COMPILE_ERROR"
                what = "compile phase" if proc is not None else "worker start-up"
                status = status if proc is not None else "RUNTIME_ERROR"
                for u in order[i:]:
                    results[u] = _fail(u, status, f"{what} {_how(exc)}\n{tail}")
                break
            if not reply.get("ok"):
                status = reply.get("status")
                status = status if status in ("COMPILE_ERROR", "REWARD_HACK") else "COMPILE_ERROR"
                for u in order[i:]:
                    results[u] = _fail(u, status, str(reply.get("log", ""))[:20000])
                break
            frozen += proc.freeze_leftovers()
        if ready is not None:  # once, before the first call: nothing is still starting beside the calls
            phases["lookahead"] = phases.get("lookahead", 0.0) + ready()
            ready = None
        try:
            results[uuid] = WorkloadJudge(proc, prepared[uuid], ctx["workloads"][uuid], job, ctx).run()
        except Failure as f:
            results[uuid] = {"uuid": uuid, "status": f.status, "log": f.reason, "correctness": f.correctness}
        except ProcessFailure as exc:
            tail = proc.log_tail(options.log_tail_chars)
            stragglers += proc.close()
            proc = None
            failures += 1
            status = "TIMEOUT" if exc.kind == "timeout" else "RUNTIME_ERROR"
            results[uuid] = _fail(uuid, status, f"candidate {_how(exc)}\n{tail}")
            if failures > options.max_restarts:
                for u in order[i + 1 :]:
                    results[u] = _fail(u, "RUNTIME_ERROR", f"the candidate process failed {failures} times "
                                       f"(last: {_how(exc)}); not restarted again")  # fmt: skip
                break
        i += 1
    if proc is not None:
        stragglers += proc.close()
    record = containment_record(plan, hello, stragglers, frozen)
    for res in results.values():
        res["containment"] = record
    return results
