"""Every row's verdict (ok / noisy / violation / incorrect), comparisons that refuse noise, and the report's text."""

import json

from solkit.cli import main
from solkit.report.figures import roofline_backends
from solkit.report.render import compare, html_report, markdown
from solkit.report.verdict import NOISY_CV, compare_verdict, device_label, ratio_interval, verdict


def _row(backend="eager", ms=1.0, trials=(1.0, 1.0, 1.0), cv=0.01, **kw):
    return {"problem": "rmsnorm", "op_type": "rmsnorm", "mode": "fwd", "size": "s", "model": "m", "workload": "w",
            "backend": backend, "status": "ok", "ms": ms, "flops_total": 1e6, "fused_bytes": 1e6,
            "sol_calibrated": 0.5, "bound": "memory", "tier": "40-60 %", "advice": "look at **bytes**",
            "timing": {"method": "wall", "cv": cv, "trial_medians_ms": list(trials)}, **kw}  # fmt: skip


def _results(rows, quick=True):
    cal = {"arch": "cpu-derived", "basis": "calibrated", "flops": {"bf16_tensor": 1.3e10}, "bandwidth": 5.6e9}
    return {"meta": {"device": {"kind": "cpu", "name": "x86_64", "cpu_count": 2}, "arch": None,
                     "cpu_model": "Intel(R) Xeon(R) Processor", "torch_threads": 1, "sizes": ["s"],
                     "backends": ["eager", "vendor"], "ceilings": {"calibrated": cal},
                     "calibration": {"quick": quick, "timestamp": "t"}, "timing_policy": "wall"},
            "rows": rows}  # fmt: skip


def test_each_row_gets_one_verdict():
    assert verdict(_row()) == "ok"
    assert verdict(_row(cv=NOISY_CV * 2)) == "noisy"
    assert verdict(_row(sol_violation=True)) == "violation"
    assert verdict(_row(status="incorrect")) == "incorrect"


def test_same_code_twice_is_not_a_speedup():
    # Two runs of the same code on a noisy CPU: medians differ 3x, but the trials overlap, so no verdict of speed.
    a, b = _row(trials=(1.0, 3.0, 0.9), cv=0.05), _row(trials=(2.5, 0.8, 1.1), cv=0.05)
    said, ci = compare_verdict(a, b)
    assert said == "same within noise" and ci[0] < 1.0 < ci[1]
    steady_a, steady_b = _row(trials=(2.0, 2.02, 1.98)), _row(trials=(1.0, 1.01, 0.99))
    said, ci = compare_verdict(steady_a, steady_b)
    assert said == "faster" and ci[0] > 1.0
    assert compare_verdict(_row(cv=1.0), steady_b)[0].startswith("not compared (a noisy")
    assert ratio_interval([1.0], [1.0, 2.0]) is None


def test_report_a_b_refuses_noise_and_writes_out(tmp_path, capsys):
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(_results([_row(trials=(1.0, 3.0, 0.9), ms=1.0)])))
    fb.write_text(json.dumps(_results([_row(trials=(2.5, 0.8, 1.1), ms=1.1)])))
    assert main(["report", str(fa), str(fb), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "same within noise" in out and "0 faster" in out
    saved = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert saved["rows"][0]["verdict"] == "same within noise"
    assert (tmp_path / "cmp" / "comparison.csv").read_text().startswith("problem,")
    assert compare(_results([_row()]), _results([_row()]))[0]["ci95_low"] == 1.0


def test_cpu_device_label_is_the_cpu():
    label = device_label(_results([])["meta"])
    assert label == "Intel(R) Xeon(R) Processor (CPU, 2 cores, 1 torch threads)"
    assert device_label({"device": {"name": "NVIDIA H200"}, "arch": "h200-sxm"}) == "NVIDIA H200 (h200-sxm)"


def test_markdown_and_html_say_the_basis_verdicts_and_tiers_once(tmp_path):
    rows = [_row(), _row("vendor", sol_violation=True), _row("compile", cv=0.5),
            _row("liger", bound="compute", tier="<20 %", advice="use the tensor cores")]  # fmt: skip
    res = _results(rows)
    md = markdown(res)
    assert "QUICK calibration" in md and "bf16_tensor 0.013 TFLOP/s" in md and "0 TFLOP/s" not in md
    assert "| violation |" in md and "| noisy |" in md and "| ok |" in md
    assert "### memory-bound rows" in md and "### compute-bound rows" in md
    page = html_report(res, {})
    assert "**" not in page and "['s']" not in page and "arch None" not in page
    assert "<b>spec</b>" in page and "size class: s;" in page
    assert page.count("look at <b>bytes</b>") == 1  # the advice once, rendered
    assert "<h3>compute-bound rows</h3>" in page and "<h3>memory-bound rows</h3>" in page
    assert 'id="legend"' in page and "class='swatch'" in page
    assert "<tr class='violation'>" in page and "<tr class='noisy'>" in page


def test_roofline_legend_lists_only_backends_that_ran():
    rows = [_row("eager"), _row("vendor"), {**_row("solkit"), "status": "error", "ms": None}]
    assert roofline_backends(_results(rows)) == ["eager", "vendor"]
