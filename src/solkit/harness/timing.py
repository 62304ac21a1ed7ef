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
  nodes (:mod:`.graph_timing`); ``graph`` times the whole graph and subtracts a graph of flushes alone;
* ``kernel``: the GPU kernels' own start/end per call from the CUDA profiler (:mod:`.kernel_timing`),
  the quantity Nsight Compute reports as ``gpu__time_duration``; with ``cooldown_ms`` the GPU idles
  before every call, so each starts from an isolated launch's clock state, as under Nsight Compute;
* the median of at least 50 repetitions over at least 3 trials, with quartiles, min/max and the
  coefficient of variation; a warning flag when CV > 5 %;
* on the CPU, host wall clock (``time.perf_counter``) per call.

Nothing here allocates inside the timed region: argument sets are built by the caller beforehand.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

TimingMethod = Literal["auto", "events", "graph", "graph_events", "kernel", "wall"]
METHODS = ("auto", "events", "graph", "graph_events", "kernel", "wall")

#: Calls shorter than this (median of a quick probe, in ms) are timed with CUDA graphs in "auto".
GRAPH_THRESHOLD_MS = 0.1
CV_WARN = 0.05
#: Minimum wall time of the GPU warm-up (ms; 0 = the call count alone) and the cap on its calls. Off by default:
#: on the H200 a 50-200 ms warm-up did not remove the occasional slow first timing of a shape (session 7,
#: benchmarks/results/timing_warmup_probe_h200_s7.json), and clocks were at 1980 MHz before every timing.
WARMUP_MS = 0.0
WARMUP_MAX_CALLS = 20000


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
    RMSNorm on the H200, see benchmarks/results/harness_ncu_comparison.json).
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


def _call(fn: Callable[..., Any], pool: Sequence[tuple] | None, i: int) -> Any:
    if pool:
        return fn(*pool[i % len(pool)])
    return fn()


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
) -> TimingResult:
    """Time ``fn`` (called as ``fn(*args_pool[i % len(args_pool)])``, or ``fn()`` with no pool).

    ``method="auto"`` picks wall clock on the CPU, and on a GPU CUDA events, or per-call events inside
    a CUDA graph (``graph_events``) when a quick probe says a call takes under
    :data:`GRAPH_THRESHOLD_MS`; with ``cooldown_ms`` > 0 it picks ``kernel`` (graph replays cannot idle
    between calls). Returns per-call milliseconds. ``l2_flush_mode`` selects how :class:`L2Flusher`
    evicts the L2 ("read" or "write"). On a GPU the warm-up runs at least ``warmup`` calls and then, with
    ``warmup_ms`` > 0, keeps calling until that much wall time has passed (for clocks that ramp up slowly
    from idle: a count alone warms a 30 µs kernel for 0.15 ms).
    """
    if method not in METHODS:
        raise ValueError(f"unknown timing method {method!r}; allowed: {', '.join(METHODS)}")
    reps = max(int(reps), 1)
    trials = max(int(trials), 1)
    dev = torch.device(device) if device is not None else _guess_device(args_pool)
    if dev.type != "cuda":
        return _bench_wall(fn, args_pool, reps, trials, warmup)
    if dev.index is None:  # "cuda" means the current device; torch.cuda.set_device needs an index
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    host: list[float] = []
    for i in range(max(warmup, 3)):
        t0 = time.perf_counter()
        _call(fn, args_pool, i)
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize(dev)
    host_ms = statistics.median(host[1:])  # the first call may compile or autotune
    _warm_for(fn, args_pool, warmup_ms, dev)
    flusher = L2Flusher(dev, l2_flush_mode) if flush_l2 else None
    lead = host_ms if hasattr(torch.cuda, "_sleep") else None
    if method == "auto" and cooldown_ms > 0:
        method = "kernel"
    elif method == "auto":
        # The probe times the GPU alone (launch hidden), so a host-bound launcher is not mistaken for a
        # long kernel and denied the graph mode.
        probe = _bench_events(fn, args_pool, 5, 1, flusher, dev, lead)
        method = "graph_events" if probe.median_ms < GRAPH_THRESHOLD_MS else "events"
    result = None
    if method == "graph_events":
        from solkit.harness.graph_timing import bench_graph_events  # imports this module

        try:
            result = bench_graph_events(fn, args_pool, device=dev, reps=reps, trials=trials, warmup=0,
                                        flush_mode=l2_flush_mode if flush_l2 else None,
                                        calls_per_graph=calls_per_graph)  # fmt: skip
        except Exception:  # noqa: BLE001 - uncapturable callables (host syncs, allocs) fall back to events
            torch.cuda.synchronize(dev)
            result = _bench_events(fn, args_pool, reps, trials, flusher, dev, lead)
            result.method = "cuda_events (graph capture failed)"
    elif method == "kernel":
        from solkit.harness.kernel_timing import bench_kernel_time  # imports this module

        result = bench_kernel_time(fn, args_pool, device=dev, reps=reps, trials=trials, flusher=flusher,
                                   cooldown_ms=cooldown_ms)  # fmt: skip
    elif method == "graph":
        try:
            result = _bench_graph(fn, args_pool, reps, trials, flusher, calls_per_graph, dev)
        except Exception:  # noqa: BLE001 - uncapturable callables (host syncs, allocs) fall back to events
            torch.cuda.synchronize(dev)
            result = _bench_events(fn, args_pool, reps, trials, flusher, dev, lead)
            result.method = "cuda_events (graph capture failed)"
    elif method == "events":
        result = _bench_events(fn, args_pool, reps, trials, flusher, dev, lead, cooldown_ms)
    elif method == "wall":
        result = _bench_wall(fn, args_pool, reps, trials, warmup, sync=dev)
    result.host_ms = host_ms
    result.cooldown_ms = float(cooldown_ms) if result.method in ("cuda_events", "cupti_kernel_span") else 0.0
    result.l2_flush_mode = l2_flush_mode if flush_l2 else None
    return result


def _warm_for(fn: Callable[..., Any], pool: Sequence[tuple] | None, warmup_ms: float, dev: torch.device) -> None:
    """Call ``fn`` until ``warmup_ms`` of wall time have passed (synchronising every few calls, so the time is
    GPU time once the queue is full), at most :data:`WARMUP_MAX_CALLS` calls."""
    if warmup_ms <= 0:
        return
    t0 = time.perf_counter()
    calls = 0
    while (time.perf_counter() - t0) * 1e3 < warmup_ms and calls < WARMUP_MAX_CALLS:
        for _ in range(8):
            _call(fn, pool, calls)
            calls += 1
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)


def _guess_device(args_pool: Sequence[tuple] | None) -> torch.device:
    for args in args_pool or ():
        for a in args:
            if isinstance(a, torch.Tensor):
                return a.device
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _bench_wall(fn, pool, reps, trials, warmup, sync: torch.device | None = None) -> TimingResult:
    for i in range(warmup):
        _call(fn, pool, i)
    samples: list[float] = []
    medians: list[float] = []
    k = 0
    for _ in range(trials):
        trial: list[float] = []
        for _ in range(reps):
            t0 = time.perf_counter()
            _call(fn, pool, k)
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


def _bench_events(fn, pool, reps, trials, flusher, dev, lead_ms: float | None = None, cooldown_ms: float = 0.0):
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
            _call(fn, pool, k)
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


def _capture(body: Callable[[], None], dev) -> torch.cuda.CUDAGraph:
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


def _time_graph(graph: torch.cuda.CUDAGraph, reps: int, dev) -> list[float]:
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


def _bench_graph(fn, pool, reps, trials, flusher, calls, dev) -> TimingResult:
    calls = max(int(calls), 1)

    def body() -> None:
        for i in range(calls):
            if flusher is not None:
                flusher()
            _call(fn, pool, i)

    def flush_only() -> None:
        for _ in range(calls):
            flusher()

    graph = _capture(body, dev)
    flush_graph = _capture(flush_only, dev) if flusher is not None else None
    samples: list[float] = []
    medians: list[float] = []
    for _ in range(trials):
        total = _time_graph(graph, reps, dev)
        if flush_graph is not None:
            # The flush cost is subtracted as its median so one noisy flush replay doesn't skew a sample.
            flush_ms = statistics.median(_time_graph(flush_graph, max(reps // 2, 5), dev))
            total = [max(t - flush_ms, 0.0) for t in total]
        trial = [t / calls for t in total]
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="cuda_graph", reps=reps, trials=trials, l2_flushed=flusher is not None,
        rotating_buffers=len(pool or ()) or 1, calls_per_sample=calls,
    )  # fmt: skip
