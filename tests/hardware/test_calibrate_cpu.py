"""The CPU calibration: STREAM-like copy and triad over arrays beyond the last-level cache, a GEMM peak per dtype."""

import solkit.hardware.calibrate as calibrate
from solkit.hardware.detect import detect_device


def test_stream_arrays_exceed_the_last_level_cache(monkeypatch):
    monkeypatch.setattr(calibrate, "cpu_llc_bytes", lambda: 32 * 2**20)
    monkeypatch.setattr(calibrate, "available_memory_bytes", lambda: 64 * 2**30)
    n, why = calibrate.cpu_stream_bytes(quick=False)
    assert n >= 4 * 32 * 2**20 and "last-level cache 32 MiB" in why
    assert calibrate.cpu_stream_bytes(quick=True)[1].startswith("quick")


def test_cpu_calibration_measures_copy_triad_and_gemm_per_dtype(monkeypatch):
    monkeypatch.setattr(calibrate, "cpu_stream_bytes", lambda quick: (8 * 2**20, "8 MiB (test)"))
    cal = calibrate.run_calibration(detect_device("cpu"), quick=True)
    assert {"copy", "triad"} <= set(cal.bandwidth) and "STREAM-like triad" in cal.bandwidth["triad"].method
    assert {"fp32", "fp64", "bf16"} <= set(cal.gemm) and "torch.matmul" in cal.gemm["fp32"].method
    assert cal.quick and any("quick calibration" in w for w in cal.warnings)
