"""Run one solution in its own subprocess, with separate compile and run timeouts.

The worker (:mod:`solkit.harness.worker`) reports JSON events over a pipe; this side enforces the
deadlines and turns every way a worker can fail into per-workload results, so a crashing or
hanging candidate never takes the harness down:

==============================================  =============================================
what happened                                   status of the affected workload(s)
==============================================  =============================================
reference raised / hung / crashed the process   INVALID_REFERENCE (that workload)
import or build failed                          COMPILE_ERROR (every workload)
compile phase exceeded ``compile_timeout``      TIMEOUT (every remaining workload)
a workload exceeded ``run_timeout``             TIMEOUT (that workload)
the process died during a workload (segfault,   RUNTIME_ERROR (that workload)
``os._exit``, CUDA fault)
==============================================  =============================================

After a kill or crash the worker is started again for the workloads still to run. Each attempt
always settles at least one workload, so the loop ends.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import solkit


@dataclass
class RunnerOptions:
    compile_timeout: float = 120.0
    run_timeout: float = 300.0
    startup_timeout: float = 180.0
    log_tail_chars: int = 4000
    use_fork_server: bool = True


def _tail(path: Path, n: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-n:]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(solkit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_solution(job: dict[str, Any], options: RunnerOptions | None = None) -> tuple[dict, dict[str, dict]]:
    """Evaluate ``job['workloads']``; returns (environment, {uuid: result event})."""
    options = options or RunnerOptions()
    remaining = list(job["workloads"])
    results: dict[str, dict] = {}
    environment: dict[str, Any] = {}
    attempt = 0
    base = Path(job.get("work_dir") or tempfile.mkdtemp(prefix="solkit_eval_"))
    while remaining:
        attempt += 1
        work = base / f"attempt{attempt}"
        work.mkdir(parents=True, exist_ok=True)
        job_path = work / "job.json"
        job_path.write_text(json.dumps({**job, "workloads": remaining, "work_dir": str(work)}))
        log_path = work / "worker.log"
        env_out, settled = _attempt(job_path, log_path, remaining, options)
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


class _ForkServer:
    """The shared :mod:`solkit.harness.forkserver` process (started on first use)."""

    _instance: _ForkServer | None = None

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solkit.harness.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            text=True,
            bufsize=1,
        )
        ready = self.proc.stdout.readline()
        if not ready or not json.loads(ready).get("ready"):
            raise RuntimeError("fork server did not start")
        atexit.register(self.close)

    @classmethod
    def get(cls) -> _ForkServer | None:
        if cls._instance is not None and cls._instance.proc.poll() is not None:
            cls._instance = None
        if cls._instance is None:
            try:
                cls._instance = _ForkServer()
            except Exception:  # noqa: BLE001 - fall back to plain spawning
                return None
        return cls._instance

    def start(self, job: Path, fifo: Path, log: Path) -> int:
        self.proc.stdin.write(json.dumps({"job": str(job), "fifo": str(fifo), "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["pid"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def _start(job_path: Path, log_path: Path, use_fork_server: bool) -> tuple[_Proc, int]:
    """Start a worker; returns it and the fd we read its events from."""
    server = _ForkServer.get() if use_fork_server else None
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
            env=_child_env(),
            start_new_session=True,  # its own process group: a kill takes the candidate's children too
        )
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return _Proc(popen=popen), read_fd


def _attempt(job_path: Path, log_path: Path, remaining: list[str], options: RunnerOptions):
    # Long on purpose: one event loop over the worker's pipe whose phases share the deadline and partial results.
    proc, read_fd = _start(job_path, log_path, options.use_fork_server)
    environment: dict[str, Any] = {}
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
                    phase = "reference"
                    deadline = time.monotonic() + options.run_timeout
                elif ev == "phase":
                    phase, current = msg.get("phase"), msg.get("uuid")
                    timeout = options.compile_timeout if phase == "compile" else options.run_timeout
                    deadline = time.monotonic() + timeout
                elif ev == "result" and msg.get("uuid") in remaining:
                    settled[msg["uuid"]] = msg
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
