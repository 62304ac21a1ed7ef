"""Tables fit a 100-column terminal: the bench table drops secondary columns there, and numbers never wrap."""

from rich.console import Console

import solkit.bench.cli as bench_cli


def test_bench_table_fits_100_columns(monkeypatch):
    con = Console(width=100, record=True)
    monkeypatch.setattr(bench_cli, "console", con)
    row = {"problem": "fused_linear_cross_entropy", "size": "s", "model": "llama3-8b", "backend": "compile",
           "status": "ok", "sol_violation": True, "ms": 123.456, "tflops": 0.0123, "tbs": 0.00561, "sol_spec": 0.5,
           "sol_calibrated": 1.0, "bound": "memory", "speedup_vs_eager": 12.5, "tier": "80-100 %"}  # fmt: skip
    meta = {"device": {"kind": "cpu", "name": "x86_64", "cpu_count": 2}, "cpu_model": "Intel(R) Xeon(R) Processor",
            "ceilings": {"calibrated": {}}, "calibration": {"quick": True}, "timing_policy": "wall clock"}  # fmt: skip
    bench_cli.print_table({"meta": meta, "rows": [row] * 3})
    text = con.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "123.456" in text and "violation" in text and "fused_linear_cross_entropy" in text


def test_profile_report_on_a_cpu_claims_no_cuda_timing():
    from solkit.profile.report import to_markdown

    text = to_markdown({"gpu": {"available": False}, "versions": {}, "ncu": {}, "targets": []})
    assert "CUDA events" not in text and "wall clock on the CPU" in text
