"""Timing primitives: the result record, its summary statistics, the L2 flush, wall-clock and CUDA-event timing.

The protocol that chooses between them is :func:`solkit.timing.protocol.benchmark`; the CUDA-graph
methods are in :mod:`.graphs`, the profiler-based kernel span in :mod:`.kernel`. Nothing here
allocates inside the timed region: argument sets are built by the caller beforehand.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

CV_WARN = 0.05


@dataclass
class TimingResult:
    """Summary statistics of one timed callable, all times in milliseconds per call."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    cv: float
    method: str
    reps: int
    trials: int
    l2_flushed: bool
    rotating_buffers: int
    calls_per_sample: int = 1
    high_variance: bool = False
    trial_medians_ms: list[float] = field(default_factory=list)
    samples_ms: list[float] = field(default_factory=list, repr=False)
    #: Host (CPU) time to launch one call, without waiting for the GPU: the eager launch cost that
    #: CUDA graphs and the GPU-side timing below leave out, reported separately.
    host_ms: float | None = None
    #: CUDA events only: a GPU spin-wait before each repetition let the CPU enqueue the call ahead of
    #: the start event, so the interval is the GPU's time, not the host's launch time.
    launch_hidden: bool = False
    #: ``kernel`` method: median of the per-call sum of kernel durations (span minus internal gaps).
    busy_ms: float | None = None
    #: ``kernel`` method: GPU time per call launched by other threads between the calls, included in the samples.
    foreign_ms: float | None = None
    #: GPU idle time before every call (isolated-launch protocol), 0 for back-to-back repetitions.
    cooldown_ms: float = 0.0
    l2_flush_mode: str | None = None
    #: Back-to-back calls run before timing so clocks and power settle (the harness's prewarm).
    prewarm_calls: int = 0

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not samples:
            d.pop("samples_ms")
        return d


def summarize(samples_ms: Sequence[float], trial_medians: Sequence[float], **meta: Any) -> TimingResult:
    """Turn raw per-call samples into a :class:`TimingResult`."""
    if not samples_ms:
        raise ValueError("no timing samples")
    xs = sorted(samples_ms)
    n = len(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if n >= 2 else [xs[0], xs[0], xs[0]]
    mean = statistics.fmean(xs)
    stdev = statistics.pstdev(xs) if n > 1 else 0.0
    cv = stdev / mean if mean > 0 else 0.0
    return TimingResult(
        median_ms=statistics.median(xs),
        mean_ms=mean,
        min_ms=xs[0],
        max_ms=xs[-1],
        q1_ms=q[0],
        q3_ms=q[2],
        iqr_ms=q[2] - q[0],
        cv=cv,
        high_variance=cv > CV_WARN,
        trial_medians_ms=list(trial_medians),
        samples_ms=list(samples_ms),
        **meta,
    )


class L2Flusher:
    """Evicts the L2 cache by writing a buffer twice its size (a memset kernel, ~tens of µs).

    ``mode="read"`` (the default) sweeps the buffer with a reduction instead: the write-back of dirty
    lines (the previous call's outputs) happens during the flush, and the L2 is left holding clean
    lines, as after Nsight Compute's cache flush. With ``"write"`` the L2 is left full of the memset's
    dirty lines, whose write-back is charged to the timed call (measured: +3-5 % on a 50 µs
    RMSNorm on the H200, see benchmarks/results/harness/2026-11-30_h200_ncu_comparison.json).
    """

    def __init__(self, device: torch.device, mode: str = "read") -> None:
        if mode not in ("write", "read"):
            raise ValueError(f"unknown L2 flush mode {mode!r}; allowed: read, write")
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 64 * 2**20)
        self.mode = mode
        self.buffer = torch.zeros(max(2 * l2, 8 * 2**20) // 4, dtype=torch.int32, device=device)
        self._sink = torch.empty(1, dtype=torch.int64, device=device)

    def __call__(self) -> None:
        if self.mode == "read":
            torch.sum(self.buffer.view(1, -1), dim=1, dtype=torch.int64, out=self._sink)
        else:
            self.buffer.zero_()


def call_from_pool(fn: Callable[..., Any], pool: Sequence[tuple] | None, i: int) -> Any:
    """Call ``fn`` on argument set ``i`` of the rotating ``pool`` (or with no arguments when there is no pool)."""
    if pool:
        return fn(*pool[i % len(pool)])
    return fn()


def guess_device(args_pool: Sequence[tuple] | None) -> torch.device:
    for args in args_pool or ():
        for a in args:
            if isinstance(a, torch.Tensor):
                return a.device
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def bench_wall(fn, pool, reps, trials, warmup, sync: torch.device | None = None) -> TimingResult:
    for i in range(warmup):
        call_from_pool(fn, pool, i)
    samples: list[float] = []
    medians: list[float] = []
    k = 0
    for _ in range(trials):
        trial: list[float] = []
        for _ in range(reps):
            t0 = time.perf_counter()
            call_from_pool(fn, pool, k)
            if sync is not None:
                torch.cuda.synchronize(sync)
            trial.append((time.perf_counter() - t0) * 1e3)
            k += 1
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="wall", reps=reps, trials=trials, l2_flushed=False,
        rotating_buffers=len(pool or ()) or 1,
    )  # fmt: skip


def bench_events(fn, pool, reps, trials, flusher, dev, lead_ms: float | None = None, cooldown_ms: float = 0.0):
    """CUDA events around each call; with ``lead_ms``, a GPU spin of about twice the host launch time
    runs before each start event, so the CPU has enqueued the call before the GPU reaches it. With
    ``cooldown_ms``, the GPU idles that long before every call (a sync, then a host sleep)."""
    samples: list[float] = []
    medians: list[float] = []
    k = 0
    # torch.cuda._sleep spins for a number of SM cycles; 2e9/s over-estimates the clock, so the spin
    # lasts at least the requested time. Capped at 50 ms per repetition.
    spin = int(min(2 * lead_ms * 1e-3, 0.05) * 2e9) if lead_ms else 0
    for _ in range(trials):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for r in range(reps):
            if cooldown_ms > 0:
                torch.cuda.synchronize(dev)
                time.sleep(cooldown_ms * 1e-3)
            if flusher is not None:
                flusher()
            if spin:
                torch.cuda._sleep(spin)
            starts[r].record()
            call_from_pool(fn, pool, k)
            ends[r].record()
            k += 1
        torch.cuda.synchronize(dev)
        trial = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="cuda_events", reps=reps, trials=trials, l2_flushed=flusher is not None,
        rotating_buffers=len(pool or ()) or 1, launch_hidden=bool(spin),
    )  # fmt: skip
