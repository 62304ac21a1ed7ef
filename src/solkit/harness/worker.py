"""The reference process: the problem's reference, run before and apart from any candidate code.

Protocol: ``python -m solkit.harness.worker JOB.json FD`` (or forked by :mod:`.forkserver`) — JSON event
lines on file descriptor ``FD``: ``env`` → per workload ``phase`` (reference) and ``result`` (status
``PREPARED`` with the file the ground truth was saved to and ``timing_s``, the seconds the reference's own
timing took, or the reason the reference is unusable) → ``done``. Each tensor kept is written from the device
into a file of its own, and the file named in the result is the workload's record of them
(:mod:`.truth`), all in the first of the job's ``ref_dirs`` with room (a private directory in ``/dev/shm`` first,
memory and no disk I/O, then one beside the evaluation). The judge (:mod:`.runner`, :mod:`.judge`) maps them and
deletes them before the candidate process starts, so the ground truth then lives only in the judge's memory.

For every workload, ``trials`` correctness sets, then ``pool`` timing sets, then two rounds of ``pool`` fresh sets
(all different: each (seed, uuid, index) triple seeds its own generator, and the judge salts the seed
with a per-run secret): inputs are generated on the device, the reference runs on a copy, inputs and
outputs are kept on the host; the fp64 reference is computed for set 0, and the reference is timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.harness import anticheat as ac
from solkit.harness import correctness as cc
from solkit.harness import inputs as gen
from solkit.harness import timed
from solkit.harness.truth import HostCopies, nbytes_of, save_ground_truth
from solkit.output import jsonable
from solkit.problems.loader import Problem, load_problem
from solkit.problems.schema import Solution, Workload

_FLOAT_CONTRACTS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


class Channel:
    def __init__(self, fd: int) -> None:
        self._f = os.fdopen(fd, "w", buffering=1)

    def send(self, event: str, **data: Any) -> None:
        self._f.write(json.dumps(jsonable({"event": event, **data}), default=str, allow_nan=False) + "\n")
        self._f.flush()


@dataclass
class Prepared:
    """Ground truth for one workload, computed before candidate code is imported."""

    inputs: list[dict[str, Any]] = field(default_factory=list)  # host copies, one per trial
    outputs: list[dict[str, Any]] = field(default_factory=list)  # host copies of reference outputs
    ref64: dict[str, Any] | None = None
    ref64_note: str = ""
    aliases: bool = False
    constant: dict[str, bool] = field(default_factory=dict)
    timing: dict[str, Any] | None = None
    timing_s: float | None = None  # the reference's own timing: timed work (the speed-up's denominator), not overhead
    parts_s: dict[str, float] = field(default_factory=dict)  # where the reference phase went (docs/sol-execbench.md)
    call_ms: list[float] = field(default_factory=list)
    pool: int = 1
    error: tuple[str, str] | None = None  # (status, log) when the reference is unusable


@contextlib.contextmanager
def _part(p: Prepared, name: str):
    """Add the block's seconds to ``p.parts_s[name]`` (where the reference phase went)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        p.parts_s[name] = p.parts_s.get(name, 0.0) + time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _poison_all(values: dict[str, Any], keep: dict[str, Any]) -> None:
    for v in values.values():
        if isinstance(v, torch.Tensor) and type(v) is torch.Tensor and not ac.aliases_inputs({"o": v}, keep):
            with contextlib.suppress(RuntimeError):
                gen.poison_(v)


#: Bytes of the rotating timing pool (its sets' inputs and outputs together) on a GPU and on a CPU. On a GPU each
#: timed call is preceded by an L2 flush and new input values (:mod:`.timed`), so more sets add coverage (more timed
#: outputs validated, more fresh sets), not honesty; every set beyond the first costs three input sets made, copied
#: and staged per workload (timing, two fresh rounds). Sets of hundreds of MB therefore get a pool of one.
POOL_BYTES = {"cuda": 256 << 20, "cpu": 512 << 20}


def pool_size(per_set_bytes: int, device_type: str, requested: int) -> int:
    """How many rotating sets the timing uses: ``requested``, fewer where they would exceed POOL_BYTES, at least 1."""
    budget = POOL_BYTES.get(device_type, POOL_BYTES["cpu"])
    return max(1, min(requested, budget // max(per_set_bytes, 1)))


class Worker:
    def __init__(self, job: dict, chan: Channel) -> None:
        self.job, self.chan = job, chan
        self.device = torch.device(job["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.problem: Problem = load_problem(job["problem"], job.get("workload_file"))
        self.solution = Solution.model_validate(job["solution"])
        self.seed = int(job["seed"])
        self.trials = max(int(job["trials"]), 1)
        self.factory = gen.InputFactory(self.problem, self.device, self.seed)
        self.out_names = list(self.problem.definition.outputs)
        self.workloads = {w.uuid: w for w in self.problem.workloads if w.uuid in set(job["workloads"])}
        self.order = [u for u in job["workloads"] if u in self.workloads]
        self.prepared: dict[str, Prepared] = {}
        self.work_dir = Path(job["work_dir"])
        self.candidate_dir = self.work_dir / "candidate"

    # ------------------------------------------------------------------ reference phase
    def prepare(self, w: Workload, host: HostCopies) -> Prepared:
        """The ground truth of ``w``; every tensor kept goes to the host through ``host``."""
        p = Prepared()
        ref = self.problem.reference_fn()
        expected_shapes = self.problem.output_shapes(w)
        expected_dtypes = self.problem.output_dtypes()
        total, t = self.trials, -1
        try:
            while t + 1 < total:
                t += 1
                with _part(p, "generate"):
                    inputs = self.factory.generate(w, t)
                    _sync(self.device)
                if t == 0:
                    try:
                        self.problem.check_input_constraints(w, inputs)
                    except SolkitError as exc:
                        p.error = ("INVALID_REFERENCE", str(exc))
                        return p
                with _part(p, "host_copies"):
                    p.inputs.append(host.copy(inputs))
                try:
                    t0 = time.perf_counter()
                    raw = ref(*inputs.values())
                    _sync(self.device)
                    p.call_ms.append((time.perf_counter() - t0) * 1e3)
                    outs = cc.normalize_outputs(raw, self.out_names)
                except Exception as exc:  # noqa: BLE001 - any reference failure makes it invalid
                    p.error = ("INVALID_REFERENCE", f"reference failed on trial {t}: {exc!r}\n{traceback.format_exc()}")
                    return p
                for n, v in outs.items():
                    shape = tuple(v.shape) if isinstance(v, torch.Tensor) else None
                    if shape != expected_shapes[n] and not (shape == () and expected_shapes[n] is None):
                        p.error = ("INVALID_REFERENCE", f"reference output {n!r} has shape {shape}, "
                                   f"definition says {expected_shapes[n]}")  # fmt: skip
                        return p
                    if isinstance(v, torch.Tensor) and v.dtype != expected_dtypes[n]:
                        p.error = ("INVALID_REFERENCE", f"reference output {n!r} is {v.dtype}, "
                                   f"definition says {expected_dtypes[n]}")  # fmt: skip
                        return p
                if why := cc.reference_problem(outs):
                    p.error = ("INVALID_REFERENCE", why)
                    return p
                p.aliases = p.aliases or bool(ac.aliases_inputs(outs, inputs))
                for n, v in outs.items():
                    p.constant[n] = p.constant.get(n, True) and cc.is_constant(v)
                with _part(p, "host_copies"):
                    p.outputs.append(host.copy(outs))
                _poison_all(outs, inputs)
                del raw, outs
                if t == 0:
                    with _part(p, "fp64_reference"):  # from the host copy: the reference may have written its inputs
                        self._prepare_fp64(p, p.inputs[0])
                    per_set = nbytes_of(p.inputs[0]) + nbytes_of(p.outputs[0])
                    p.pool = pool_size(per_set, self.device.type, int(self.job["pool"]))
                    total = self.trials + 3 * p.pool  # correctness sets, timing sets, two rounds of fresh sets
                del inputs
        except Exception as exc:  # noqa: BLE001 - input generation errors
            p.error = ("RUNTIME_ERROR", f"input generation failed: {exc!r}\n{traceback.format_exc()}")
            return p
        if self.job["benchmark_reference"]:
            try:
                with _part(p, "timing_inputs"):
                    pool = [tuple(gen.to_device(p.inputs[self.trials + k], self.device).values())
                            for k in range(p.pool)]  # fmt: skip
                t0 = time.perf_counter()
                try:
                    res, note, between = timed.time_pool(ref, pool, self.job, self.device, min(p.call_ms))
                finally:
                    p.timing_s = time.perf_counter() - t0
                del pool
                p.timing = res.to_dict()
                if between:
                    p.timing["between_calls"] = between
                if note:
                    p.timing["note"] = note
            except Exception as exc:  # noqa: BLE001 - reference timing is informative only
                p.timing = {"error": repr(exc)}
        return p

    def _prepare_fp64(self, p: Prepared, inputs: dict[str, Any]) -> None:
        if not self.job["precision_check"]:
            p.ref64_note = "disabled"
            return
        dtypes = self.problem.output_dtypes()
        if not any(d in _FLOAT_CONTRACTS and d != torch.float64 for d in dtypes.values()):
            p.ref64_note = "no low-precision float outputs"
            return
        try:
            up = ac.upcast_inputs(gen.to_device(inputs, self.device))
            outs = cc.normalize_outputs(self.problem.reference_fn()(*up.values()), self.out_names)
            _sync(self.device)
            p.ref64 = {k: v.detach().to("cpu", torch.float64) for k, v in outs.items() if isinstance(v, torch.Tensor)}
        except Exception as exc:  # noqa: BLE001 - references that cannot run in fp64 skip the check
            p.ref64_note = f"fp64 reference failed ({type(exc).__name__}: {str(exc)[:120]}); precision check skipped"


def _telemetry():
    try:
        from solkit.hardware.telemetry import snapshot

        return snapshot
    except Exception:  # noqa: BLE001 - telemetry is optional
        return None


def environment(device: torch.device) -> dict[str, Any]:
    libs = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton

        libs["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional
        pass
    if torch.version.cuda:
        libs["cuda"] = torch.version.cuda
    try:
        from solkit import __version__

        libs["solkit"] = __version__
    except Exception:  # noqa: BLE001
        pass
    info: dict[str, Any] = {}
    try:
        from solkit.hardware.detect import detect_device

        info = detect_device(device).to_dict()
    except Exception as exc:  # noqa: BLE001 - detection is best-effort
        info = {"error": repr(exc)}
    if device.type == "cuda":
        hardware = torch.cuda.get_device_name(device)
        if info.get("driver"):
            libs["driver"] = str(info["driver"])
    else:
        hardware = f"CPU ({platform.processor() or platform.machine() or 'unknown'}, {os.cpu_count()} threads)"
    return {"hardware": hardware, "libs": libs, "device": info}


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[1]).read_text())
    if job["device"] == "cpu":  # Triton has no CPU driver: its interpreter is the only way it runs there
        os.environ.setdefault("TRITON_INTERPRET", "1")
    chan = Channel(int(argv[2]))
    if job.get("cpu_threads"):
        torch.set_num_threads(int(job["cpu_threads"]))
    w = Worker(job, chan)
    chan.send("env", environment=environment(w.device))
    folders = [Path(d) for d in job["ref_dirs"]]
    set_crc = getattr(torch.serialization, "set_crc32_options", None)
    if set_crc is not None:  # a private file read back at once: a checksum of GBs is seconds of CPU for nothing
        set_crc(False)
    attempt = Path(job["work_dir"]).name  # a retry's files never replace the files of an earlier attempt
    for i, uuid in enumerate(w.order):
        chan.send("phase", phase="reference", uuid=uuid)
        host = HostCopies(folders, f"{attempt}_w{i}")
        p = w.prepare(w.workloads[uuid], host)
        with _part(p, "save"):
            record = host.stand_ins({**vars(p), "trials": w.trials})
            path = save_ground_truth(record, folders, f"{attempt}_w{i}.pt")
        p.parts_s["reference_calls"] = sum(p.call_ms) / 1e3
        parts = {k: round(v, 4) for k, v in p.parts_s.items()}
        chan.send("result", uuid=uuid, status="PREPARED", file=str(path), timing_s=p.timing_s, parts_s=parts)
        del p
        if w.device.type == "cuda":
            torch.cuda.empty_cache()
    chan.send("done")
    return 0


if __name__ == "__main__":
    # A spawned worker (no fork server) leaves as the forked ones do, without torch's teardown: the runner waits
    # for it to be gone before the candidate runs, and its events are all sent (each line flushed).
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
