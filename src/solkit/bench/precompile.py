"""Compile the ``compile`` backend's graphs for many workloads at once, in worker processes.

Why: ``torch.compile`` spends ~5-15 s per (problem, shape) in Dynamo, AOTAutograd and Inductor,
almost all of it single-threaded Python on the host. Run one workload after the other, the l suite's
40 workloads would spend most of the main job compiling. Inductor keeps what it compiles in its
on-disk caches (the FX-graph and AOTAutograd caches, and Triton's kernel cache), so N worker
processes compiling disjoint workloads *before* the timed run leave the main process with cache
hits: it still traces with Dynamo, but skips lowering, code generation and kernel compilation.

Nothing is timed while the workers run (they share the GPU only for one call each), and a worker
that fails or hangs costs nothing but its cache entries: the main process then compiles as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any


def _warm_one(problem_dir: str, uuid: str, device: str, dtype: str | None) -> tuple[str, float, str | None]:
    """Worker: build the compile backend for one workload and call it once (compiles and caches)."""
    t0 = time.perf_counter()
    try:
        import torch

        from solkit.backends import BACKENDS
        from solkit.bench.runner import cast_floats, clone_values
        from solkit.harness.inputs import InputFactory
        from solkit.problems import load_problem

        problem = load_problem(problem_dir)
        workload = next(w for w in problem.workloads if w.uuid == uuid)
        fn = BACKENDS["compile"].make(problem.definition.name, problem.reference_fn())
        if fn is None:
            return uuid, 0.0, None
        dev = torch.device(device)
        override = getattr(torch, dtype) if dtype else None
        inputs = cast_floats(InputFactory(problem, dev).generate(workload, 0), override)
        fn(*clone_values(inputs).values())  # as the bench calls it: clones of the generated inputs
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return uuid, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001 - the main process compiles this one itself
        return uuid, time.perf_counter() - t0, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def default_workers(device: str) -> int:
    """Half the host's cores, at most 8, on a GPU; none on a CPU (compiling would steal the timed cores)."""
    if not device.startswith("cuda"):
        return 0
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def precompile(
    chosen: list[tuple[Any, Any]], device: str, dtype: str | None, workers: int, timeout_s: float = 600.0
) -> dict[str, Any]:
    """Warm Inductor's caches for every chosen (problem, workload) in ``workers`` processes.

    Returns a summary: wall seconds, summed compile seconds, workers and the failures (uuid: error).
    The workers are plain ``python -m solkit.bench.precompile`` processes, not multiprocessing children:
    Inductor's FX-graph cache keys differ in a multiprocessing "spawn" child (measured with torch 2.13),
    so a child's cache entries would never be hit by the main process.
    """
    jobs = [(str(p.root), w.uuid) for p, w in chosen]
    summary: dict[str, Any] = {"workers": workers, "workloads": len(jobs), "wall_s": 0.0, "compile_s": 0.0}
    summary["failed"] = {}
    if workers <= 0 or not jobs:
        return summary
    t0 = time.perf_counter()
    n = min(workers, len(jobs))
    procs = []
    for k in range(n):
        shard = jobs[k::n]
        cmd = [sys.executable, "-m", "solkit.bench.precompile", device, dtype or "", json.dumps(shard)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(timeout_s - (time.perf_counter() - t0), 1.0))
        except subprocess.TimeoutExpired:
            proc.kill()  # a hung compile must not hold the timed run
            proc.communicate()
            summary["failed"]["*"] = f"stopped after {timeout_s:.0f} s; the rest compiles in the main process"
            continue
        for line in out.splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                summary["compile_s"] += rec["seconds"]
                if rec["error"]:
                    summary["failed"][rec["uuid"]] = rec["error"]
        if proc.returncode and "*" not in summary["failed"]:
            summary["failed"]["*"] = f"a warm-up process exited with code {proc.returncode}"
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    summary["compile_s"] = round(summary["compile_s"], 2)
    return summary


def main(argv: list[str]) -> int:
    """``python -m solkit.bench.precompile DEVICE DTYPE JOBS_JSON``: warm each job, one JSON line each."""
    device, dtype, jobs = argv[0], argv[1] or None, json.loads(argv[2])
    for problem_dir, uuid in jobs:
        uuid, seconds, err = _warm_one(problem_dir, uuid, device, dtype)
        print(json.dumps({"uuid": uuid, "seconds": round(seconds, 3), "error": err}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
