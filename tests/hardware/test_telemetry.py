"""Telemetry sampler: decoding, summaries from a fake reader, and the no-NVML path."""

from __future__ import annotations

import time

import pytest

from solkit.hardware import telemetry
from solkit.hardware.telemetry import TelemetrySampler, decode_reasons, snapshot


def test_decode_reasons_names_bits_and_unknown():
    assert decode_reasons(0) == []
    assert decode_reasons(None) == []
    assert decode_reasons(0x4 | 0x1) == ["gpu_idle", "sw_power_cap"]
    assert decode_reasons(0x1000) == ["unknown_0x1000"]


class FakeReader:
    source = "nvml"

    def __init__(self, masks, clocks):
        self.masks = list(masks)
        self.clocks = list(clocks)
        self.i = 0
        self.closed = False

    def static(self):
        return {
            "name": "Fake H200",
            "uuid": "GPU-0",
            "max_sm_clock_mhz": 1980,
            "max_mem_clock_mhz": 3201,
            "power_limit_w": 700.0,
        }

    def sample(self):
        k = min(self.i, len(self.masks) - 1)
        self.i += 1
        return {
            "t": time.monotonic(),
            "sm_clock_mhz": self.clocks[k],
            "mem_clock_mhz": 3201,
            "power_w": 600.0 + k,
            "temperature_c": 40 + k,
            "reasons_mask": self.masks[k],
        }

    def close(self):
        self.closed = True


@pytest.mark.parametrize(
    "masks,throttled",
    [([0x0, 0x1, 0x0], False), ([0x0, 0x4, 0x4], True), ([0x10, 0x2], False), ([0x40], True)],
)
def test_summary_flags_only_real_slowdowns(monkeypatch, masks, throttled):
    reader = FakeReader(masks, [1980, 1500, 1185])
    monkeypatch.setattr(telemetry, "_open_reader", lambda idx: (reader, None))
    with TelemetrySampler(device_index=0, interval_s=0.01) as t:
        time.sleep(0.05)
    s = t.summary()
    assert s["available"] is True
    assert s["n_samples"] >= 2
    assert s["throttled"] is throttled
    assert (s["warning"] is not None) is throttled
    assert s["sm_clock_mhz"]["min"] <= s["sm_clock_mhz"]["median"] <= s["sm_clock_mhz"]["max"]
    assert s["power_w"]["max"] >= s["power_w"]["median"]
    assert reader.closed


def test_sampler_without_nvml_does_not_raise(monkeypatch):
    monkeypatch.setattr(telemetry, "_open_reader", lambda idx: (None, "nvml: ImportError: no pynvml"))
    with TelemetrySampler() as t:
        pass
    s = t.summary()
    assert s["available"] is False and s["throttled"] is False and "pynvml" in s["reason"]
    snap = snapshot(0)
    assert snap["available"] is False


def test_sampler_survives_a_failing_reader(monkeypatch):
    reader = FakeReader([0], [1980])
    calls = {"n": 0}
    real = reader.sample

    def flaky():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("driver went away")
        return real()

    reader.sample = flaky
    monkeypatch.setattr(telemetry, "_open_reader", lambda idx: (reader, None))
    with TelemetrySampler(interval_s=0.01) as t:
        time.sleep(0.05)
    s = t.summary()
    assert s["available"] and s["n_samples"] == 1 and "driver went away" in s["note"]


def test_cuda_visible_devices_mapping(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert telemetry._nvml_index(1) == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert telemetry._nvml_index(0) == 0
