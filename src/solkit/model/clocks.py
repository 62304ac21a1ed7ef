"""The GPU's SM clock and power while the profiled step's kernels ran: NVML samples laid on the profiler's timeline.

A compute-bound kernel's time scales with the SM clock, and the clock is not fixed: an H200 holds its boost clock
while a step alternates GEMMs with memory-bound work, and drops it at its power cap when GEMMs run back to back
(``solkit.hardware.telemetry``). So a GEMM's SOL fraction inside a step and alone in the bench can differ by the
clock alone; :meth:`StepClocks.during` gives the clock a set of kernels ran at, for ``solkit model-check`` to say.

The timelines meet at the step's start: the profiler's first CPU event (microseconds on its clock) and
``time.monotonic()`` just before the step was called (the samples' clock). Samples are a few milliseconds apart,
so a kernel shorter than that may have none inside it; its clock is then estimated from the nearest sample within
one sampling period of its span (labelled ``nearest``, with the distance), and is None only where no sample came
that close.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

#: NVML sampling period during the profiled step (each sample costs well under a millisecond).
INTERVAL_S = 0.002


@dataclass
class StepClocks:
    """NVML samples of one profiled step, each at its time on the profiler's clock (microseconds)."""

    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, sampler: Any, step_start_monotonic: float, events: list) -> StepClocks:
        """Lay a finished ``TelemetrySampler``'s samples on the profile of the step that started at
        ``step_start_monotonic``."""
        on_host = [e for e in events if getattr(getattr(e, "device_type", None), "name", "CPU") == "CPU"]
        starts = [e.time_range.start for e in on_host]
        if not starts:
            return cls([], sampler.summary())
        t0_us = min(starts)
        laid = [(t0_us + (s["t"] - step_start_monotonic) * 1e6, s) for s in sampler.samples if "t" in s]
        return cls(laid, sampler.summary())

    def during(self, spans: list[tuple[float, float]], reach_s: float = INTERVAL_S) -> dict[str, Any] | None:
        """SM clock (median, MHz), power (max, W) and whether a slow-down reason was set, over the samples taken
        while any of ``spans`` (profiler microseconds) ran. Where none fell inside one, an estimate: each span's
        nearest sample within ``reach_s`` of its edges (``nearest`` True, ``nearest_ms`` the farthest of them from
        its span). None when no sample came that close. ``samples`` counts the samples used."""
        from solkit.hardware.telemetry import SLOWDOWN_MASK

        timed = [(t, s) for t, s in self.samples if s.get("sm_clock_mhz") is not None]
        hits = [s for t, s in timed if any(a <= t <= b for a, b in spans)]
        far_us = 0.0
        if not hits:
            near = _nearest(timed, spans, reach_s * 1e6)
            hits = [s for _, s in near.values()]
            far_us = max((d for d, _ in near.values()), default=0.0)
        if not hits:
            return None
        power = [float(s["power_w"]) for s in hits if s.get("power_w") is not None]
        masks = [int(s["reasons_mask"]) for s in hits if s.get("reasons_mask") is not None]
        return {
            "sm_clock_mhz": statistics.median(float(s["sm_clock_mhz"]) for s in hits),
            "power_w": max(power) if power else None,
            "slowed": any(m & SLOWDOWN_MASK for m in masks),
            "samples": len(hits),
            "nearest": far_us > 0,
            **({"nearest_ms": far_us / 1e3} if far_us > 0 else {}),
        }


def _nearest(timed: list[tuple[float, dict]], spans: list[tuple[float, float]],
             reach_us: float) -> dict[int, tuple[float, dict]]:  # fmt: skip
    """Per span, the sample closest to it (before its start or after its end) within ``reach_us``: the samples'
    indices in ``timed`` (a sample near several spans counts once, at its least distance) and distances."""
    found: dict[int, tuple[float, dict]] = {}
    for a, b in spans:
        best = min(((a - t if t < a else t - b, i) for i, (t, _) in enumerate(timed)), default=None)
        if best is None or best[0] > reach_us:
            continue
        dist, i = best
        if i not in found or dist < found[i][0]:
            found[i] = (dist, timed[i][1])
    return found
