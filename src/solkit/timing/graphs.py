"""Per-call timing of short GPU calls inside a CUDA graph, with event nodes around every call.

Why: The ``graph`` mode (:func:`bench_graph`) times a graph of ``calls × (flush, call)``
and subtracts a graph of ``calls × flush``. That removes launch overhead, but the subtraction is
exact only if a flush costs the same in both graphs, and it does not: in the first graph each flush
also writes back the dirty lines the previous call left in L2 (up to the L2 size of output), so that
write-back is charged to the call. Here each call is bracketed by timing events captured as graph
*nodes* (``torch.cuda.Event(external=True)``, PyTorch ≥ 2.8), so a sample is exactly
``end(call) − start(call)`` on the GPU: no launch gaps, no flush arithmetic, and the L2 flushed
(clean, by a read sweep) before every call.

Method recorded in traces as ``cuda_graph_events``.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from solkit.timing.core import L2Flusher, TimingResult, call_from_pool, summarize


def capture_graph(body: Callable[[], None], dev) -> torch.cuda.CUDAGraph:
    """Capture ``body`` into a CUDA graph after one eager pass on a side stream."""
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        body()  # one eager pass on the side stream, as torch recommends before capture
    torch.cuda.current_stream(dev).wait_stream(stream)
    torch.cuda.synchronize(dev)
    # A capture that fails half-way (a host sync inside the callable) leaves the CUDA RNG marked as
    # capturing, and every later randn then fails; keep a fresh copy of its state to restore.
    gen = torch.cuda.default_generators[dev.index if dev.index is not None else torch.cuda.current_device()]
    fresh = gen.clone_state() if hasattr(gen, "clone_state") else None
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            body()
    except Exception:
        if fresh is not None:
            with contextlib.suppress(Exception):  # best effort; the original error matters more
                gen.graphsafe_set_state(fresh)
        raise
    torch.cuda.synchronize(dev)
    return graph


def time_graph(graph: torch.cuda.CUDAGraph, reps: int, dev) -> list[float]:
    """CUDA-event time (ms) of ``reps`` replays of ``graph``, after one warm replay."""
    graph.replay()  # warm
    torch.cuda.synchronize(dev)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        starts[r].record()
        graph.replay()
        ends[r].record()
    torch.cuda.synchronize(dev)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def bench_graph(fn, pool, reps, trials, flusher, calls, dev) -> TimingResult:
    """``graph`` method: time a graph of ``calls`` x (flush, call) and subtract a graph of the flushes alone."""
    calls = max(int(calls), 1)

    def body() -> None:
        for i in range(calls):
            if flusher is not None:
                flusher()
            call_from_pool(fn, pool, i)

    def flush_only() -> None:
        for _ in range(calls):
            flusher()

    graph = capture_graph(body, dev)
    flush_graph = capture_graph(flush_only, dev) if flusher is not None else None
    samples: list[float] = []
    medians: list[float] = []
    for _ in range(trials):
        total = time_graph(graph, reps, dev)
        if flush_graph is not None:
            # The flush cost is subtracted as its median so one noisy flush replay doesn't skew a sample.
            flush_ms = statistics.median(time_graph(flush_graph, max(reps // 2, 5), dev))
            total = [max(t - flush_ms, 0.0) for t in total]
        trial = [t / calls for t in total]
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="cuda_graph", reps=reps, trials=trials, l2_flushed=flusher is not None,
        rotating_buffers=len(pool or ()) or 1, calls_per_sample=calls,
    )  # fmt: skip


def bench_graph_events(
    fn: Callable[..., Any],
    pool: Sequence[tuple] | None,
    *,
    device: torch.device,
    reps: int = 50,
    trials: int = 3,
    warmup: int = 5,
    flush_mode: str | None = "read",
    calls_per_graph: int = 10,
) -> TimingResult:
    """Time ``fn`` per call inside a captured graph; ``reps`` samples per trial (rounded up to whole graphs)."""
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    for i in range(warmup):
        call_from_pool(fn, pool, i)
    torch.cuda.synchronize(dev)
    flusher = L2Flusher(dev, flush_mode) if flush_mode else None
    n = max(int(calls_per_graph), 1)
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)]

    def body() -> None:
        for i in range(n):
            if flusher is not None:
                flusher()
            starts[i].record()
            call_from_pool(fn, pool, i)
            ends[i].record()

    graph = capture_graph(body, dev)
    graph.replay()  # warm replay
    torch.cuda.synchronize(dev)
    replays = max(1, -(-int(reps) // n))
    samples: list[float] = []
    medians: list[float] = []
    for _ in range(max(int(trials), 1)):
        trial: list[float] = []
        for _ in range(replays):
            graph.replay()
            torch.cuda.synchronize(dev)
            trial += [s.elapsed_time(e) for s, e in zip(starts, ends)]
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="cuda_graph_events", reps=replays * n, trials=max(int(trials), 1),
        l2_flushed=flusher is not None, rotating_buffers=len(pool or ()) or 1, calls_per_sample=1,
        l2_flush_mode=flush_mode,
    )  # fmt: skip
