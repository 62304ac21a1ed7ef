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
