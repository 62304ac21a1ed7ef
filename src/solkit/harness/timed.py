"""The timing driver shared by the reference process and the candidate process: the job's timing
parameters (reps cut to a wall-clock budget), the GPU pre-warm, and :func:`solkit.timing.benchmark`
with the profiler's kernel span first on a GPU."""

from __future__ import annotations

import time
from typing import Any

import torch

from solkit import timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timing_params(job: dict, est_ms: float, device: torch.device) -> tuple[int, int, str]:
    """(reps, trials, note): the requested reps, cut so ``est_ms × reps × trials`` fits the device's budget."""
    reps, trials = int(job["reps"]), int(job["timing_trials"])
    budget_s = float(job["cpu_timing_budget_s"] if device.type == "cpu" else job["gpu_timing_budget_s"])
    note = ""
    if est_ms > 0 and est_ms * reps * trials / 1e3 > budget_s:
        new = max(int(job.get("min_reps", 5)), int(budget_s * 1e3 / (est_ms * trials)))
        if new < reps:
            note = f"reps reduced from {reps} to {new} to fit the {budget_s:g} s timing budget"
            reps = new
    return reps, trials, note


def prewarm(call, pool, seconds: float, device: torch.device) -> int:
    """Run the call back to back for ``seconds`` (GPU) so clocks and power settle first.

    A long GEMM starts near the boost clock and slows to its power-capped clock within a few
    hundred milliseconds; without this, the first timing trial is faster than the others.
    """
    if device.type != "cuda" or seconds <= 0:
        return 0
    sync(device)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        call(*pool[n % len(pool)])
        n += 1
        if n % 4 == 0:
            sync(device)  # keep the host no further than 4 calls ahead of the GPU
    sync(device)
    return n


def time_pool(call, pool: list[tuple], job: dict[str, Any], device: torch.device, est_ms: float):
    """Time ``call`` over the rotating ``pool`` with the job's protocol; returns (TimingResult, note)."""
    reps, trials, note = timing_params(job, est_ms, device)
    method = job["method"] if device.type == "cuda" else "wall"
    flush_mode = job.get("l2_flush", "read")
    warm_calls = prewarm(call, pool, float(job.get("prewarm_s", 0.0)), device)
    warmup = int(job["warmup"])
    cooldown = float(job.get("cooldown_ms", 0.0) or 0.0) if device.type == "cuda" else 0.0
    common = {"reps": reps, "trials": trials, "warmup": warmup, "flush_l2": True, "device": device,
              "l2_flush_mode": flush_mode, "cooldown_ms": cooldown}  # fmt: skip
    res = None
    if method == "auto":
        # The kernels' own GPU time per call from the CUDA profiler: the quantity Nsight Compute
        # (gpu__time_duration) and SOL-ExecBench's CUPTI timer report, free of launch latency
        # without needing a graph. Without a working profiler, the timing module's own choice
        # (in-graph events below 100 µs, else events), or events for isolated launches.
        try:
            res = timing.benchmark(call, pool, method="kernel", **common)
        except Exception as exc:  # noqa: BLE001 - e.g. CUPTI unavailable in a container
            sync(device)
            note = (note + "; " if note else "") + f"kernel timer unavailable ({type(exc).__name__})"
            method = "events" if cooldown > 0 else "auto"
    if res is None:  # graph capture failures fall back to events inside, recorded in the method name
        res = timing.benchmark(call, pool, method=method, **common)
    res.prewarm_calls = warm_calls
    return res, note
