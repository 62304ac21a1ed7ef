"""The device work of one profiled step: every kernel, copy and memset counted once, inside the step, on its launcher.

torch's profiler gives each CPU event a ``kernels`` list: every device event whose linked correlation id is the
CPU event's id, annotation spans included. That list is not safe to add up: a ``record_function`` range's span on
the GPU timeline is appended as if it were a kernel, an id shared by two CPU events hands both the same kernels,
and nothing bounds an event to the profiled window. So the device events themselves are the ground truth here:

* only kernels, copies and memsets count (not user annotations: they span kernels already counted; not CUDA
  sync records), each distinct event (name, start, end, stream) once;
* each is clipped to the step's window (the first CPU event to the step's wall time after it);
* each goes to one CPU event: the one its linked correlation id names, and among CPU events sharing that id, the
  last one that started before the kernel did (a kernel cannot start before its launch). Where this torch gives
  no linked ids, the CPU events' kernel lists are used, each entry matched to a distinct device event by name and
  duration, so that no device event is counted twice.

What is left out is reported by reason (``dropped_us``), with the union of the device intervals per stream: the
step's counted kernel time can exceed neither.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

#: Activity types of device events that are not work (torch's names for kineto's types), where torch gives them.
NOT_WORK = ("gpu_user_annotation", "cuda_sync", "cuda_profiler_range")
_RUNTIME = re.compile(r"^(cuda|cu)[A-Z]\w*$")  # cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, ...
#: Slack on the window's end: the wall clock's own start-up, the profiler's last flush.
WINDOW_SLACK = 0.02


@dataclass
class DeviceWork:
    """The step's device work: per CPU event (by ``id()``) its kernels as (name, microseconds, (start, end) on the
    profiler's clock or None), and the totals."""

    by_cpu: dict[int, list[tuple[str, float, tuple | None]]] = field(default_factory=lambda: defaultdict(list))
    total_us: float = 0.0  # every counted device event, linked or not
    unlinked_us: float = 0.0  # counted device events no CPU event launched (or none that could have)
    mislinked_us: float = 0.0  # of which: linked only to CPU events that started after the kernel did
    busy_us: float = 0.0  # the union of the counted intervals, over all streams
    stream_busy_us: dict[str, float] = field(default_factory=dict)
    dropped_us: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    linking: str = ""  # "correlation ids" or "kernel lists"

    def stats(self) -> dict:
        return {
            "linking": self.linking,
            "device_busy_ms": self.busy_us / 1e3,
            "mislinked_ms": self.mislinked_us / 1e3,
            "stream_busy_ms": {s: us / 1e3 for s, us in self.stream_busy_us.items()},
            "dropped_ms": {k: us / 1e3 for k, us in self.dropped_us.items() if us > 0},
        }


def is_device(e) -> bool:
    return getattr(e, "device_type", None) is not None and e.device_type.name in ("CUDA", "PrivateUse1", "XPU")


def is_annotation(e) -> bool:
    return bool(getattr(e, "is_user_annotation", False)) or getattr(e, "activity_type", None) == "gpu_user_annotation"


def _is_work(e) -> bool:
    return is_device(e) and not is_annotation(e) and getattr(e, "activity_type", None) not in NOT_WORK


def _span(e) -> tuple[float | None, float | None, float]:
    tr = e.time_range
    return getattr(tr, "start", None), getattr(tr, "end", None), float(tr.elapsed_us())


def _window(events: list, wall_s: float | None) -> tuple[float, float] | None:
    starts = [getattr(e.time_range, "start", None) for e in events if not is_device(e) and hasattr(e, "time_range")]
    starts = [s for s in starts if s is not None]
    if not wall_s or not starts:
        return None
    t0 = min(starts)
    return t0, t0 + wall_s * 1e6 * (1 + WINDOW_SLACK) + 1000.0


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def device_work(events: list, wall_s: float | None = None) -> DeviceWork:
    """The step's device work from its profiler events (``wall_s``: the step's wall time, for its window)."""
    dw = DeviceWork()
    window = _window(events, wall_s)
    seen: set[tuple] = set()
    work: list[tuple[object, float, float | None, tuple | None]] = []  # (event, counted us, start, counted span)
    streams: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for d in events:
        if not is_device(d):
            continue
        start, end, dur = _span(d)
        if not _is_work(d):
            dw.dropped_us["annotation or sync span"] += dur
            continue
        key = (d.name, start, end, getattr(d, "device_resource_id", None))
        if start is not None and key in seen:
            dw.dropped_us["the same device event twice"] += dur
            continue
        seen.add(key)
        span = (start, end) if start is not None and end is not None else None
        if window is not None and span is not None:
            s, e = max(start, window[0]), min(end, window[1])
            counted = max(e - s, 0.0)
            dw.dropped_us["outside the step's window"] += dur - counted
            span, dur = (s, e), counted
        if span is not None and dur > 0:
            streams[str(getattr(d, "device_resource_id", 0))].append(span)
        if dur > 0:
            work.append((d, dur, start, span))
    dw.total_us = sum(w[1] for w in work)
    dw.stream_busy_us = {s: _union(v) for s, v in streams.items()}
    dw.busy_us = _union([iv for v in streams.values() for iv in v])
    # a torch that keeps no linked ids on its events leaves the attribute at 0 (or lacks it): use the kernel lists
    if any(getattr(w[0], "linked_correlation_id", 0) for w in work):
        _link_by_id(events, work, dw)
    else:
        _link_by_lists(events, work, dw)
    return dw


def is_runtime(e) -> bool:
    """A CUDA runtime or driver call on the host (``cudaLaunchKernel``): its id is the CUPTI correlation of the device
    work it launched, not a torch op's id."""
    kind = getattr(e, "activity_type", None)
    return kind in ("cuda_runtime", "cuda_driver") or bool(_RUNTIME.match(e.name))


def _contains(c, t: float | None) -> bool:
    return t is None or c.time_range.start <= t <= c.time_range.end


def _link_by_id(events: list, work: list, dw: DeviceWork) -> None:
    """Each device event on the CPU event its linked id names. Of CPU events sharing that id, the one in whose span
    its launch call ran (the runtime event with the device event's own correlation id), else the last to start before
    the device event did: the GPU may run far behind the host, so the launch call, where torch gives it, decides."""
    dw.linking = "correlation ids"
    cpu_by_id: dict[int, list] = defaultdict(list)
    launches: dict[int, object] = {}
    for e in events:
        if is_device(e) or getattr(e, "is_async", False) or not getattr(e, "id", 0):
            continue
        if is_runtime(e):
            launches[e.id] = e
        else:
            cpu_by_id[e.id].append(e)
    for d, us, start, span in work:
        cands = cpu_by_id.get(getattr(d, "linked_correlation_id", 0) or -1, [])
        launch = launches.get(getattr(d, "id", 0) or -1)
        at = launch.time_range.start if launch is not None and len(cands) > 1 else None
        holding = [c for c in cands if at is not None and _contains(c, at)]
        owner = max(holding, key=lambda c: c.time_range.start) if holding else None  # the innermost
        if owner is None:
            before = [c for c in cands if start is None or c.time_range.start <= start]
            if not before:  # no launcher, or only ones that started after it: real device time, of no op
                dw.unlinked_us += us
                dw.mislinked_us += us if cands else 0.0
                continue
            owner = max(before, key=lambda c: c.time_range.start)
        dw.by_cpu[id(owner)].append((d.name, us, span))


def _link_by_lists(events: list, work: list, dw: DeviceWork) -> None:
    dw.linking = "kernel lists"
    pool: dict[tuple[str, float], list[tuple[float, float | None, tuple | None]]] = defaultdict(list)
    for d, us, start, span in work:
        pool[(d.name, float(d.time_range.elapsed_us()))].append((us, start, span))
    claimed = 0.0
    for e in events:
        if is_device(e) or is_runtime(e):  # a runtime call's id is a CUPTI correlation: its kernel list is a clash
            continue
        launched = getattr(getattr(e, "time_range", None), "start", None)
        for k in getattr(e, "kernels", ()):
            left = pool.get((k.name, float(k.duration)))
            # a device event of this name and duration that started after this CPU event did (it launched it)
            after = (i for i, (_, st, _) in enumerate(left or ()) if st is None or launched is None or st >= launched)
            i = next(after, None)
            if i is not None:
                us, _, span = left.pop(i)
                dw.by_cpu[id(e)].append((k.name, us, span))
                claimed += us
    dw.unlinked_us = max(dw.total_us - claimed, 0.0)
