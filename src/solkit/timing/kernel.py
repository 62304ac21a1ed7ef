"""GPU kernel time per call, from the CUDA profiler (CUPTI through ``torch.profiler``).

Why: CUDA events measure from the moment the GPU front end processes the start event to the moment
it processes the end event. That includes the launch latency of the first kernel (~1-2 µs even
inside a CUDA graph), which is several percent of a 50 µs kernel. Nsight Compute's
``gpu__time_duration`` and Nsight Systems report the kernels' own start/end timestamps instead. This
method reports that quantity for every call, without Nsight: each call runs inside a profiler
``record_function`` range; every CUDA runtime/driver call made inside the range is matched by its
correlation id to the GPU activity (kernels, memcpy, memset) it started; one sample is

    span = last end - first start over that activity        (busy = the sum of their durations)

so gaps *between* a call's own kernels count (they are real), host launch overhead does not, and
the L2 flush between calls (launched outside the ranges) is excluded. Launches are matched to a range
by time, whatever their thread or stream. GPU work launched by another thread *outside* every range
(between calls: work a background thread does ahead) is not any call's own, but CUPTI records it all
the same: :func:`foreign_gpu_us` totals it and :func:`bench_kernel_time` charges it to the calls in
equal shares, so work moved off the timed thread is attributed instead of vanishing.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from solkit.timing.core import L2Flusher, TimingResult, call_from_pool, summarize

#: Trace categories of host calls that start GPU work (the CUDA runtime API, and the driver API that
#: Triton's launcher uses).
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
#: Trace categories of GPU activity.
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RANGE_PREFIX = "solkit_call_"


def spans_from_trace(trace: Mapping[str, Any], prefix: str = RANGE_PREFIX) -> dict[int, dict[str, float]]:
    """Per call index: GPU ``span_us``, ``busy_us`` and ``kernels`` from a Chrome trace (torch.profiler export).

    Calls are the ``user_annotation`` ranges named ``prefix + index``; a call with no GPU activity is absent.
    """
    events = trace.get("traceEvents", trace) if isinstance(trace, Mapping) else trace
    ranges: list[tuple[float, float, int]] = []
    launches: list[tuple[float, int]] = []
    gpu: dict[int, list[tuple[float, float]]] = {}
    for ev in events:
        cat, name = ev.get("cat", ""), ev.get("name", "")
        args = ev.get("args") or {}
        if cat == "user_annotation" and name.startswith(prefix):
            suffix = name[len(prefix) :]
            if suffix.isdigit():
                ranges.append((float(ev["ts"]), float(ev["ts"]) + float(ev.get("dur", 0.0)), int(suffix)))
        elif cat in _LAUNCH_CATS and "correlation" in args:
            launches.append((float(ev["ts"]), int(args["correlation"])))
        elif cat in _GPU_CATS and "correlation" in args:
            gpu.setdefault(int(args["correlation"]), []).append((float(ev["ts"]), float(ev.get("dur", 0.0))))
    ranges.sort()
    out: dict[int, dict[str, float]] = {}
    for ts, corr in launches:
        owner = next((idx for start, end, idx in ranges if start <= ts <= end), None)
        if owner is None or corr not in gpu:
            continue
        acc = out.setdefault(owner, {"first": float("inf"), "last": 0.0, "busy_us": 0.0, "kernels": 0})
        for start, dur in gpu[corr]:
            acc["first"] = min(acc["first"], start)
            acc["last"] = max(acc["last"], start + dur)
            acc["busy_us"] += dur
            acc["kernels"] += 1
    return {
        i: {"span_us": a["last"] - a["first"], "busy_us": a["busy_us"], "kernels": a["kernels"]} for i, a in out.items()
    }


def foreign_gpu_us(trace: Mapping[str, Any], prefix: str = RANGE_PREFIX) -> float:
    """GPU busy time (µs) launched outside every call range by another thread than the timing thread, or started
    after the first call with no launch record in the trace.

    The timing thread (the one that ran the ranges and made most launches inside them) launching outside the
    ranges is the L2 flush, not foreign; GPU work that started before the first range was queued before profiling.
    """
    events = trace.get("traceEvents", trace) if isinstance(trace, Mapping) else trace
    ranges: list[tuple[float, float]] = []
    timing_tids: set[Any] = set()
    launches: dict[int, tuple[float, Any]] = {}
    gpu: list[tuple[int, float, float]] = []
    for ev in events:
        cat, name, args = ev.get("cat", ""), ev.get("name", ""), ev.get("args") or {}
        if cat == "user_annotation" and name.startswith(prefix) and name[len(prefix) :].isdigit():
            ranges.append((float(ev["ts"]), float(ev["ts"]) + float(ev.get("dur", 0.0))))
            timing_tids.add(ev.get("tid"))
        elif cat in _LAUNCH_CATS and "correlation" in args:
            launches[int(args["correlation"])] = (float(ev["ts"]), ev.get("tid"))
        elif cat in _GPU_CATS and "correlation" in args:
            gpu.append((int(args["correlation"]), float(ev["ts"]), float(ev.get("dur", 0.0))))
    if not ranges:
        return 0.0
    inside = Counter(tid for ts, tid in launches.values() if any(a <= ts <= b for a, b in ranges))
    if inside:
        timing_tids.add(inside.most_common(1)[0][0])
    first = min(a for a, _ in ranges)
    total = 0.0
    for corr, ts, dur in gpu:
        launch = launches.get(corr)
        if launch is None:
            total += dur if ts >= first else 0.0
        elif launch[1] not in timing_tids and not any(a <= launch[0] <= b for a, b in ranges):
            total += dur
    return total


def bench_kernel_time(
    fn: Callable[..., Any],
    pool: Sequence[tuple] | None,
    *,
    device: torch.device,
    reps: int = 50,
    trials: int = 3,
    flusher: L2Flusher | None = None,
    cooldown_ms: float = 0.0,
    before_call: Callable[[int], Any] | None = None,
) -> TimingResult:
    """Per-call GPU kernel span (ms) under the CUDA profiler; the caller has warmed ``fn`` up.

    ``cooldown_ms`` idles the GPU before every call (host sleep after a sync), so each call starts from
    the clock state of an isolated launch, as under Nsight Compute. ``before_call(k)`` runs before the
    L2 flush of call ``k``, outside its range (a judge resets cache state or refreshes inputs there).
    GPU work of other threads between the calls (:func:`foreign_gpu_us`) is added to every sample in
    equal shares and reported as ``foreign_ms`` per call.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    samples: list[float] = []
    medians: list[float] = []
    busy: list[float] = []
    foreign_ms = 0.0
    k = 0
    for _ in range(max(int(trials), 1)):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for r in range(max(int(reps), 1)):
                if cooldown_ms > 0:
                    torch.cuda.synchronize(device)
                    time.sleep(cooldown_ms * 1e-3)
                if before_call is not None:
                    before_call(k)
                if flusher is not None:
                    flusher()
                with record_function(f"{RANGE_PREFIX}{r}"):
                    call_from_pool(fn, pool, k)
                k += 1
            torch.cuda.synchronize(device)
        fd, path = tempfile.mkstemp(suffix=".json", prefix="solkit_kernel_trace_")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
            spans = spans_from_trace(trace)
        finally:
            os.unlink(path)
        if not spans:
            raise RuntimeError("the profiler recorded no GPU activity for the timed calls (CUPTI unavailable?)")
        share = foreign_gpu_us(trace) / max(int(reps), 1)
        foreign_ms += share * 1e-3 / max(int(trials), 1)
        trial = [(s["span_us"] + share) * 1e-3 for s in spans.values()]
        busy += [s["busy_us"] * 1e-3 for s in spans.values()]
        samples += trial
        medians.append(statistics.median(trial))
    return summarize(
        samples, medians, method="cupti_kernel_span", reps=max(int(reps), 1), trials=max(int(trials), 1),
        l2_flushed=flusher is not None, rotating_buffers=len(pool or ()) or 1, busy_ms=statistics.median(busy),
        foreign_ms=foreign_ms,
    )  # fmt: skip
