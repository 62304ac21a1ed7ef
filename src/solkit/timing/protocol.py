"""The timing protocol every solkit measurement uses.

Rules (see docs/measurement.md):

* warm-up first, so compilation, module load and handle creation stay out of the numbers;
* on a GPU, CUDA events around each call, with the L2 cache flushed (by default a read sweep over a
  buffer twice the L2 size, which leaves the L2 clean as Nsight Compute's flush does) between
  repetitions, and a rotating pool of argument sets so that repeated calls do not hit data left in
  cache by the previous call. Before each start event the GPU spins
  (``torch.cuda._sleep``) for about twice the call's host launch time, so the CPU has enqueued the
  call by the time the GPU reaches it: the interval is GPU time, not Python launch overhead (the
  host launch time is reported separately as ``host_ms``);
* CUDA-graph modes for short calls (< ~100 µs), where launch overhead would otherwise dominate:
  ``calls_per_graph`` calls (rotating arguments, each preceded by an L2 flush) are captured into one
  graph. ``graph_events`` (what ``auto`` picks) captures timing events around every call as graph
  nodes (:mod:`.graphs`); ``graph`` times the whole graph and subtracts a graph of flushes alone;
* ``kernel``: the GPU kernels' own start/end per call from the CUDA profiler (:mod:`.kernel`),
  the quantity Nsight Compute reports as ``gpu__time_duration``; with ``cooldown_ms`` the GPU idles
  before every call, so each starts from an isolated launch's clock state, as under Nsight Compute;
* the median of at least 50 repetitions over at least 3 trials, with quartiles, min/max and the
  coefficient of variation; a warning flag when CV > 5 %;
* on the CPU, host wall clock (``time.perf_counter``) per call.

Nothing here allocates inside the timed region: argument sets are built by the caller beforehand.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from solkit.timing.core import L2Flusher, TimingResult, bench_events, bench_wall, call_from_pool, guess_device
from solkit.timing.graphs import bench_graph, bench_graph_events
from solkit.timing.kernel import bench_kernel_time

TimingMethod = Literal["auto", "events", "graph", "graph_events", "kernel", "wall"]
METHODS = ("auto", "events", "graph", "graph_events", "kernel", "wall")

#: Calls shorter than this (median of a quick probe, in ms) are timed with CUDA graphs in "auto".
GRAPH_THRESHOLD_MS = 0.1
#: Minimum wall time of the GPU warm-up (ms; 0 = the call count alone) and the cap on its calls. Off by default:
#: on the H200 a 50-200 ms warm-up did not remove the occasional slow first timing of a shape
#: (benchmarks/results/timing/2026-11-30_h200_warmup_probe.json), and clocks were at 1980 MHz before every timing.
WARMUP_MS = 0.0
WARMUP_MAX_CALLS = 20000


def benchmark(
    fn: Callable[..., Any],
    args_pool: Sequence[tuple] | None = None,
    *,
    method: TimingMethod = "auto",
    reps: int = 50,
    trials: int = 3,
    warmup: int = 5,
    flush_l2: bool = True,
    calls_per_graph: int = 10,
    device: torch.device | str | None = None,
    l2_flush_mode: str = "read",
    cooldown_ms: float = 0.0,
    warmup_ms: float = WARMUP_MS,
    before_call: Callable[[int], Any] | None = None,
) -> TimingResult:
    """Time ``fn`` (called as ``fn(*args_pool[i % len(args_pool)])``, or ``fn()`` with no pool).

    ``method="auto"`` picks wall clock on the CPU, and on a GPU CUDA events, or per-call events inside
    a CUDA graph (``graph_events``) when a quick probe says a call takes under
    :data:`GRAPH_THRESHOLD_MS`; with ``cooldown_ms`` > 0 it picks ``kernel`` (graph replays cannot idle
    between calls). Returns per-call milliseconds. ``l2_flush_mode`` selects how :class:`L2Flusher`
    evicts the L2 ("read" or "write"). On a GPU the warm-up runs at least ``warmup`` calls and then, with
    ``warmup_ms`` > 0, keeps calling until that much wall time has passed (for clocks that ramp up slowly
    from idle: a count alone warms a 30 µs kernel for 0.15 ms). ``before_call(k)`` runs before call ``k``'s
    L2 flush, outside its timing, with the ``kernel`` method only (graph replays and events cannot host it).
    """
    if method not in METHODS:
        raise ValueError(f"unknown timing method {method!r}; allowed: {', '.join(METHODS)}")
    reps = max(int(reps), 1)
    trials = max(int(trials), 1)
    dev = torch.device(device) if device is not None else guess_device(args_pool)
    if dev.type != "cuda":
        return bench_wall(fn, args_pool, reps, trials, warmup)
    if dev.index is None:  # "cuda" means the current device; torch.cuda.set_device needs an index
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    host: list[float] = []
    for i in range(max(warmup, 3)):
        t0 = time.perf_counter()
        call_from_pool(fn, args_pool, i)
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize(dev)
    host_ms = statistics.median(host[1:])  # the first call may compile or autotune
    warm_for(fn, args_pool, warmup_ms, dev)
    flusher = L2Flusher(dev, l2_flush_mode) if flush_l2 else None
    lead = host_ms if hasattr(torch.cuda, "_sleep") else None
    if method == "auto" and cooldown_ms > 0:
        method = "kernel"
    elif method == "auto":
        # The probe times the GPU alone (launch hidden), so a host-bound launcher is not mistaken for a
        # long kernel and denied the graph mode.
        probe = bench_events(fn, args_pool, 5, 1, flusher, dev, lead)
        method = "graph_events" if probe.median_ms < GRAPH_THRESHOLD_MS else "events"
    result = None
    if method == "graph_events":
        try:
            result = bench_graph_events(fn, args_pool, device=dev, reps=reps, trials=trials, warmup=0,
                                        flush_mode=l2_flush_mode if flush_l2 else None,
                                        calls_per_graph=calls_per_graph)  # fmt: skip
        except Exception:  # noqa: BLE001 - uncapturable callables (host syncs, allocs) fall back to events
            torch.cuda.synchronize(dev)
            result = bench_events(fn, args_pool, reps, trials, flusher, dev, lead)
            result.method = "cuda_events (graph capture failed)"
    elif method == "kernel":
        result = bench_kernel_time(fn, args_pool, device=dev, reps=reps, trials=trials, flusher=flusher,
                                   cooldown_ms=cooldown_ms, before_call=before_call)  # fmt: skip
    elif method == "graph":
        try:
            result = bench_graph(fn, args_pool, reps, trials, flusher, calls_per_graph, dev)
        except Exception:  # noqa: BLE001 - uncapturable callables (host syncs, allocs) fall back to events
            torch.cuda.synchronize(dev)
            result = bench_events(fn, args_pool, reps, trials, flusher, dev, lead)
            result.method = "cuda_events (graph capture failed)"
    elif method == "events":
        result = bench_events(fn, args_pool, reps, trials, flusher, dev, lead, cooldown_ms)
    elif method == "wall":
        result = bench_wall(fn, args_pool, reps, trials, warmup, sync=dev)
    result.host_ms = host_ms
    result.cooldown_ms = float(cooldown_ms) if result.method in ("cuda_events", "cupti_kernel_span") else 0.0
    result.l2_flush_mode = l2_flush_mode if flush_l2 else None
    return result


def warm_for(fn: Callable[..., Any], pool: Sequence[tuple] | None, warmup_ms: float, dev: torch.device) -> None:
    """Call ``fn`` until ``warmup_ms`` of wall time have passed (synchronising every few calls, so the time is
    GPU time once the queue is full), at most :data:`WARMUP_MAX_CALLS` calls."""
    if warmup_ms <= 0:
        return
    t0 = time.perf_counter()
    calls = 0
    while (time.perf_counter() - t0) * 1e3 < warmup_ms and calls < WARMUP_MAX_CALLS:
        for _ in range(8):
            call_from_pool(fn, pool, calls)
            calls += 1
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
