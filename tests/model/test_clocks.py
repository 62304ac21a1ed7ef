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
    assert gemm == {"sm_clock_mhz": 1500, "power_w": 700, "slowed": True, "samples": 1, "nearest": False}
    both = c.during([(t0, t0 + 2_000), (t0 + 19_000, t0 + 21_000)])
    assert both["sm_clock_mhz"] == pytest.approx(1975) and not both["slowed"]
    assert c.during([(t0 + 30_000, t0 + 31_000)]) is None  # no sample inside nor within 2 ms: no clock claimed


def _laid(*samples):
    """Samples already on the profiler's clock (microseconds)."""
    return StepClocks([(t, _sample(None, mhz, watts, mask)) for t, mhz, watts, mask in samples])


def test_a_sample_inside_a_span_wins_over_nearer_ones_outside():
    c = _laid((1000.0, 1830, 400, 0), (1500.0, 1980, 300, 0), (4000.0, 1500, 700, 0x4))
    # the second span holds the 1500 us sample; the first span's neighbours are not used
    got = c.during([(1100.0, 1200.0), (1400.0, 1600.0)])
    assert got == {"sm_clock_mhz": 1980, "power_w": 300, "slowed": False, "samples": 1, "nearest": False}


def test_a_short_kernel_without_a_sample_gets_the_nearest_within_one_interval():
    # 0.1 ms kernels between samples 2 ms apart: none inside; each span takes its own nearest sample
    c = _laid((0.0, 1980, 300, 0), (2000.0, 1830, 450, 0x4), (4000.0, 1965, 320, 0), (9000.0, 1500, 700, 0x4))
    got = c.during([(1700.0, 1800.0), (4300.0, 4400.0)])
    # 200 us before the 2000 us sample, 300 us after the 4000 us one; the 9000 us sample is not the nearest
    assert got["nearest"] is True and got["nearest_ms"] == pytest.approx(0.3)
    assert got["samples"] == 2 and got["sm_clock_mhz"] == pytest.approx((1830 + 1965) / 2)
    assert got["power_w"] == 450 and got["slowed"] is True
    # two spans sharing one nearest sample count it once
    shared = c.during([(2100.0, 2200.0), (2300.0, 2400.0)])
    assert shared["samples"] == 1 and shared["sm_clock_mhz"] == 1830 and shared["nearest_ms"] == pytest.approx(0.1)


def test_no_sample_within_one_interval_is_no_clock():
    c = _laid((0.0, 1980, 300, 0), (10_000.0, 1830, 450, 0))
    assert c.during([(5000.0, 5100.0)]) is None  # 4.9 ms from the nearest: beyond the 2 ms sampling period
    assert c.during([(5000.0, 5100.0)], reach_s=0.005)["sm_clock_mhz"] == 1830  # a longer reach finds one
    assert c.during([(2000.0, 2100.0)])["nearest_ms"] == pytest.approx(2.0)  # exactly one period away: used
    assert StepClocks([]).during([(0.0, 1.0)]) is None
    # a sample without a clock reading is no sample
    assert StepClocks([(100.0, {"t": 0, "power_w": 300})]).during([(0.0, 200.0)]) is None


@pytest.mark.parametrize(("spans", "expected"), [
    ([(10_000.0, 11_000.0)], 2_000 / 21_000),  # itself and the GEMM at 20-21 ms inside its +-10 ms window
    ([(40_000.0, 41_000.0)], 1_000 / 11_000),  # the window clipped to the step's end (41 ms): alone in it
    ([(10_000.0, 11_000.0), (40_000.0, 41_000.0), (20_000.0, 21_000.0)], 2_000 / 21_000),  # the median of the calls
])  # fmt: skip
def test_local_duty_is_the_gemm_share_of_the_window_around_each_call(spans, expected):
    from solkit.model.gemms import local_duty

    gemms = [(10_000.0, 11_000.0), (20_000.0, 21_000.0), (40_000.0, 41_000.0)]
    assert local_duty(spans, gemms, (0.0, 41_000.0), window_us=10_000.0) == pytest.approx(expected)
    assert local_duty([], gemms, (0.0, 41_000.0)) is None
