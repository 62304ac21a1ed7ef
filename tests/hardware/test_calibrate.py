"""Calibration on the CPU (quick mode) and on a GPU (marked)."""

import pytest

from solkit.hardware.calibrate import cache_path, get_calibration, load_cached
from solkit.hardware.detect import detect_device


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLKIT_CACHE_DIR", str(tmp_path))


def test_cpu_quick_calibration_measures_and_caches():
    cal = get_calibration(quick=True)
    assert cal.bandwidth["copy"].value > 1e8  # > 0.1 GB/s on any machine
    assert cal.gemm["fp32"].value > 1e8
    assert cal.gemm["fp64"].value > 1e7
    info = detect_device()
    assert cache_path(info).exists()
    again = load_cached(info)
    assert again is not None and again.timestamp == cal.timestamp
    # A second call reuses the cache; --recalibrate measures anew.
    assert get_calibration(quick=True).timestamp == cal.timestamp


def test_recalibrate_refreshes(monkeypatch):
    first = get_calibration(quick=True)
    second = get_calibration(quick=True, recalibrate=True)
    assert second.duration_s > 0 and second.model_dump() != first.model_dump()


@pytest.mark.gpu
def test_gpu_quick_calibration():
    cal = get_calibration(quick=True)
    assert cal.bandwidth["copy"].value > 1e11
    assert "bf16" in cal.gemm and cal.gemm["bf16"].value > 1e13


@pytest.mark.parametrize(("iso_ms", "back_ms", "winner"), [(1.00, 1.02, "isolated"), (1.02, 1.00, "back-to-back")])
def test_gemm_ceiling_keeps_the_better_protocol_per_shape(monkeypatch, iso_ms, back_ms, winner):
    """A full calibration times each GEMM shape both ways and keeps the faster median (a power-capped
    GPU can run a short GEMM faster back to back than after idling)."""
    from types import SimpleNamespace

    import torch

    from solkit.hardware import calibrate

    calls = []

    def fake_benchmark(fn, **kwargs):
        calls.append(kwargs.get("cooldown_ms", 0.0))
        return SimpleNamespace(median_ms=iso_ms if kwargs.get("cooldown_ms") else back_ms)

    monkeypatch.setattr(calibrate, "benchmark", fake_benchmark)
    r, protocol = calibrate._time_gemm(lambda: None, torch.device("cpu"), quick=False)
    assert sorted(calls) == [0.0, calibrate.GEMM_COOLDOWN_MS]
    assert r.median_ms == min(iso_ms, back_ms)
    assert protocol.startswith(winner)
    calls.clear()
    r, protocol = calibrate._time_gemm(lambda: None, torch.device("cpu"), quick=True)
    assert calls == [0.0] and protocol.startswith("back-to-back")
