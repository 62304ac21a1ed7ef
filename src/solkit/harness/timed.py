"""The timing driver shared by the reference process and the candidate process: the job's timing
parameters (reps cut to a wall-clock budget), the GPU pre-warm, and :func:`solkit.timing.benchmark`
with the profiler's kernel span first on a GPU.

Between two timed calls on a GPU (outside their timing, before the L2 flush), with the kernel-span timer:

* persisting L2 lines are reset to normal and the persisting set-aside is set to 0
  (:class:`PersistingL2`): a sweep does not evict persisting lines, so an access-policy window set by the
  candidate would otherwise keep its inputs in L2 across the flush;
* the floating-point inputs of the slot about to be called are rescaled from a saved copy by a factor
  unique to the call (:class:`InputRefresh`), so no timed call sees input values an earlier call saw and a
  result cached by pointer, version or content is never reused while being timed. After timing, the
  original values are restored and each slot is called once more: those are the outputs the judge checks.
"""

from __future__ import annotations

import ctypes
import functools
import time
from typing import Any

import torch

from solkit import timing

#: CUDA driver API: CU_LIMIT_PERSISTING_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE.
_CU_LIMIT_PERSISTING_L2, _CU_ATTR_MAX_PERSISTING_L2 = 0x06, 108


@functools.cache
def _libcuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    lib.cuCtxResetPersistingL2Cache.argtypes = []
    return lib


class PersistingL2:
    """Persisting L2 lines reset and the set-aside held at 0 (CUDA driver API, the calling thread's context)."""

    def __init__(self) -> None:
        self.lib = _libcuda()
        self.resets = 0
        self.initial: int | None = None  # the set-aside before the first reset (what the process started with)
        self.found_set: list[int] = []  # set-aside sizes found non-zero at a later reset (set by the timed code)
        self.error: str | None = None if self.lib is not None else "libcuda.so.1 not loadable"

    def limit(self) -> int | None:
        if self.lib is None:
            return None
        v = ctypes.c_size_t(0)
        return int(v.value) if self.lib.cuCtxGetLimit(ctypes.byref(v), _CU_LIMIT_PERSISTING_L2) == 0 else None

    def clear(self) -> None:
        if self.lib is None or self.error:
            return
        now = self.limit()
        if self.resets == 0:
            self.initial = now
        elif now:
            self.found_set.append(now)
        r1 = self.lib.cuCtxResetPersistingL2Cache()
        r2 = self.lib.cuCtxSetLimit(_CU_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        if r1 != 0 or r2 != 0:
            self.error = f"cuCtxResetPersistingL2Cache -> {r1}, cuCtxSetLimit -> {r2}"
        self.resets += 1

    def record(self) -> dict[str, Any]:
        return {"resets": self.resets, "initial": self.initial, "set_by_timed_code": max(self.found_set, default=0),
                "error": self.error}  # fmt: skip


#: Rescaling factors 2**e * (1 + j/64): exact powers of two change every non-zero value's bytes, the mantissa step
#: (above bf16's epsilon) makes the 79 factors other than 1 distinct in every floating dtype.
_FACTORS = [2.0**e * (1 + j / 64) for j in range(16) for e in (0, 1, -1, 2, -2) if (e, j) != (0, 0)]


class InputRefresh:
    """Floating-point inputs of a pool slot rescaled, from a saved copy, by a factor unique to each call."""

    def __init__(self, pool: list[tuple]) -> None:
        self.pool = pool
        self.saved = [{i: a.detach().clone() for i, a in enumerate(args) if _refreshable(a)} for args in pool]
        self.calls = [0] * len(pool)
        self.repeated = 0  # calls that had to reuse a factor (more calls per slot than factors)

    def __call__(self, k: int) -> None:
        slot = k % len(self.pool)
        n = self.calls[slot]
        self.calls[slot] += 1
        self.repeated += n >= len(_FACTORS)
        f = _FACTORS[n % len(_FACTORS)]
        for i, orig in self.saved[slot].items():
            self.pool[slot][i].copy_(orig).mul_(f)

    def restore(self) -> None:
        for args, saved in zip(self.pool, self.saved):
            for i, orig in saved.items():
                args[i].copy_(orig)

    def record(self) -> dict[str, Any]:
        return {"refreshed_calls": sum(self.calls), "repeated_factors": self.repeated,
                "tensors_per_slot": len(self.saved[0]) if self.saved else 0}  # fmt: skip


def _refreshable(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 0 and not a.is_meta


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
    """Time ``call`` over the rotating ``pool`` with the job's protocol; returns (TimingResult, note, between):
    ``between`` records what ran between the timed calls on a GPU (None elsewhere)."""
    reps, trials, note = timing_params(job, est_ms, device)
    method = job["method"] if device.type == "cuda" else "wall"
    flush_mode = job.get("l2_flush", "read")
    warm_calls = prewarm(call, pool, float(job.get("prewarm_s", 0.0)), device)
    warmup = int(job["warmup"])
    cooldown = float(job.get("cooldown_ms", 0.0) or 0.0) if device.type == "cuda" else 0.0
    common = {"reps": reps, "trials": trials, "warmup": warmup, "flush_l2": True, "device": device,
              "l2_flush_mode": flush_mode, "cooldown_ms": cooldown}  # fmt: skip
    res = None
    guard = _between_calls(pool, device, method)
    if method == "auto":
        # The kernels' own GPU time per call from the CUDA profiler: the quantity Nsight Compute
        # (gpu__time_duration) and SOL-ExecBench's CUPTI timer report, free of launch latency
        # without needing a graph. Without a working profiler, the timing module's own choice
        # (in-graph events below 100 µs, else events), or events for isolated launches.
        try:
            res = timing.benchmark(call, pool, method="kernel", before_call=guard, **common)
        except Exception as exc:  # noqa: BLE001 - e.g. CUPTI unavailable in a container
            sync(device)
            note = (note + "; " if note else "") + f"kernel timer unavailable ({type(exc).__name__})"
            method = "events" if cooldown > 0 else "auto"
    if res is None:  # graph capture failures fall back to events inside, recorded in the method name
        res = timing.benchmark(call, pool, method=method, before_call=guard, **common)
    res.prewarm_calls = warm_calls
    if guard is None:
        return res, note, None
    guard.finish(call)
    return res, note, guard.record(res.method)


class _BetweenCalls:
    """What runs before each timed call's L2 flush on a GPU: persisting L2 reset, inputs rescaled."""

    def __init__(self, pool: list[tuple], device: torch.device) -> None:
        self.pool, self.device = pool, device
        self.l2 = PersistingL2()
        self.l2.clear()
        self.refresh: InputRefresh | None = None
        self.refresh_error: str | None = None
        try:
            self.refresh = InputRefresh(pool)
        except torch.cuda.OutOfMemoryError:  # the saved copies do not fit: timed without new values, and said so
            self.refresh_error = "no memory for a saved copy of the inputs: inputs not refreshed between calls"
            torch.cuda.empty_cache()

    def __call__(self, k: int) -> None:
        self.l2.clear()
        if self.refresh is not None:
            self.refresh(k)

    def finish(self, call) -> None:
        """Original values back, each slot called once more (the outputs the judge checks), L2 reset."""
        sync(self.device)
        if self.refresh is not None and sum(self.refresh.calls):
            self.refresh.restore()
            for args in self.pool:
                call(*args)
            sync(self.device)
        self.l2.clear()

    def record(self, method: str) -> dict[str, Any]:
        refreshed = self.refresh.record() if self.refresh is not None else {"error": self.refresh_error}
        applied = self.refresh is not None and bool(sum(self.refresh.calls))
        return {"applied": applied, "method": method, "persisting_l2": self.l2.record(), "inputs": refreshed}


def _between_calls(pool: list[tuple], device: torch.device, method: str) -> _BetweenCalls | None:
    if device.type != "cuda" or not pool or method not in ("auto", "kernel"):
        return None
    return _BetweenCalls(pool, device)
