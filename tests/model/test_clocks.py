"""NVML samples laid on the profiler's timeline: the SM clock and power a set of kernels ran at."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from solkit.model.clocks import StepClocks


def _sample(t, mhz, watts, mask=0):
    return {"t": t, "sm_clock_mhz": mhz, "power_w": watts, "reasons_mask": mask}


@pytest.mark.parametrize("offset_us", [0.0, 1234.5])
def test_samples_land_on_the_kernels_that_ran_then(offset_us):
    # the step starts at monotonic 100.0 s; its first CPU event is at offset_us on the profiler's clock
    sampler = NS(samples=[_sample(100.001, 1980, 450), _sample(100.012, 1500, 700, 0x4), _sample(100.020, 1970, 500)],
                 summary=lambda: {"available": True})  # fmt: skip
    events = [NS(name="aten::mm", device_type=NS(name="CPU"), time_range=NS(start=offset_us + 5.0)),
              NS(name="gemm", device_type=NS(name="CUDA"), time_range=NS(start=offset_us - 10.0))]  # fmt: skip
    c = StepClocks.of(sampler, 100.0, events)
    t0 = offset_us + 5.0  # the first CPU event
    gemm = c.during([(t0 + 10_000, t0 + 14_000)])  # 10-14 ms into the step: the power-capped sample
    assert gemm == {"sm_clock_mhz": 1500, "power_w": 700, "slowed": True, "samples": 1}
    both = c.during([(t0, t0 + 2_000), (t0 + 19_000, t0 + 21_000)])
    assert both["sm_clock_mhz"] == pytest.approx(1975) and not both["slowed"]
    assert c.during([(t0 + 30_000, t0 + 31_000)]) is None  # no sample inside: no clock claimed
