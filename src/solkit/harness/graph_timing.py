"""Per-call timing of short GPU calls inside a CUDA graph, with event nodes around every call.

Why: :func:`solkit.harness.timing.benchmark`'s graph mode times a graph of ``calls × (flush, call)``
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

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from solkit.harness.timing import L2Flusher, TimingResult, _call, _capture, summarize


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
        _call(fn, pool, i)
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
            _call(fn, pool, i)
            ends[i].record()

    graph = _capture(body, dev)
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
