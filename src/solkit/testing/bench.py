"""``do_bench``: Triton's timer signature and return semantics over solkit's timing protocol.

Triton's ``triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None,
return_mode="mean")`` spends ``warmup`` and ``rep`` *milliseconds* (not call counts) and returns the
mean, median, min, max, every sample, or the requested quantiles in milliseconds. This function keeps
that contract, so it can replace Triton's anywhere, including ``triton.autotune(..., do_bench=...)``
(the Autotuner calls ``do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))``), while the samples come from
:func:`solkit.timing.benchmark`:

* on a GPU, the L2 is flushed by a read sweep over twice the L2 size (Triton zeroes a 256 MiB buffer,
  which leaves the L2 full of dirty lines whose write-back is charged to the next timed call);
* a GPU spin before each start event hides the host launch time, so the interval is the GPU's time;
* calls under ~0.1 ms are timed with per-call events inside a CUDA graph (launch overhead otherwise
  dominates them); ``grad_to_none`` turns graphs off, since the gradients are reset on the host;
* the repetitions are split into up to three trials;
* on a CPU (where Triton's own ``do_bench`` finds no active driver) the host wall clock is used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

RETURN_MODES = ("min", "max", "mean", "median", "all")
#: Repetitions are split into this many trials (fewer when there are fewer repetitions).
TRIALS = 3


def quantiles_of(times: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Quantiles by linear interpolation between the closest ranks (the definition Triton uses)."""
    xs = sorted(times)
    n = len(xs)
    out = []
    for q in qs:
        if not 0 <= q <= 1:
            raise ValueError(f"quantiles must be in the range [0, 1], got {q}")
        point = q * (n - 1)
        lo, hi = math.floor(point), math.ceil(point)
        t = point - lo
        out.append((1 - t) * xs[lo] + t * xs[hi])
    return out


def summarize_times(times: Sequence[float], quantiles: Sequence[float] | None, return_mode: str) -> Any:
    """What ``do_bench`` returns for ``times``: the quantiles (a float when only one is asked for), else
    the ``return_mode`` statistic, or the list of samples for ``"all"``."""
    if quantiles is not None:
        ret = quantiles_of(times, quantiles)
        return ret[0] if len(ret) == 1 else ret
    if return_mode == "all":
        return list(times)
    return {"min": min, "max": max, "mean": statistics.mean, "median": statistics.median}[return_mode](times)


def _with_grads_reset(fn: Callable[[], Any], grad_to_none: Sequence[Any]) -> Callable[[], Any]:
    def call() -> Any:
        for x in grad_to_none:
            x.grad = None
        return fn()

    return call


def do_bench(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    grad_to_none: Sequence[Any] | None = None,
    quantiles: Sequence[float] | None = None,
    return_mode: str = "mean",
    *,
    flush_l2: bool = True,
    method: str = "auto",
    device: Any = None,
) -> Any:
    """Time ``fn()`` for about ``rep`` ms after about ``warmup`` ms of warm-up; return milliseconds.

    Returns the ``quantiles`` of the per-call times when given (one float for a single quantile), else
    the ``return_mode`` statistic: ``"mean"`` (default), ``"median"``, ``"min"``, ``"max"``, or
    ``"all"`` for the list of samples. The keyword-only ``flush_l2``, ``method`` (a
    :data:`solkit.timing.METHODS` name) and ``device`` go to :func:`solkit.timing.benchmark`.
    """
    if return_mode not in RETURN_MODES:
        raise ValueError(f"unknown return_mode {return_mode!r}; allowed: {', '.join(RETURN_MODES)}")
    from solkit.timing import benchmark

    call = _with_grads_reset(fn, grad_to_none) if grad_to_none else fn
    if grad_to_none and method == "auto":
        method = "events"
    probe_method = "events" if method in ("auto", "graph", "graph_events") else method
    # A few calls (after the first, which may compile) estimate the per-call time, as Triton does.
    estimate = benchmark(call, method=probe_method, reps=5, trials=1, warmup=1, flush_l2=flush_l2, device=device)
    per_call_ms = max(estimate.median_ms, 1e-6)
    n_warmup = max(1, int(warmup / per_call_ms))
    n_rep = max(1, int(rep / per_call_ms))
    trials = min(TRIALS, n_rep)
    result = benchmark(call, method=method, reps=math.ceil(n_rep / trials), trials=trials, warmup=n_warmup,
                       flush_l2=flush_l2, device=device)  # fmt: skip
    return summarize_times(result.samples_ms, quantiles, return_mode)
