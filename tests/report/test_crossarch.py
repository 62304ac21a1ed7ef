"""What-if SOL of bench rows on other products, and results from several devices lined up (CPU, no timing)."""

import json

import pytest

from solkit.cli import main
from solkit.errors import SolkitError
from solkit.report.crossarch import compare_devices, product_ids, what_if_section
from solkit.report.render import markdown, write_report


def _row(problem, backend, ms, flops, nbytes, sol_spec, bound="memory", size="l", model="llama3-8b"):
    return {"problem": problem, "size": size, "model": model, "backend": backend, "workload": f"{problem}-w",
            "status": "ok", "ms": ms, "flops": flops, "fused_bytes": nbytes, "flops_total": sum(flops.values()),
            "sol_spec": sol_spec, "sol_calibrated": sol_spec, "bound": bound, "tier": None}  # fmt: skip


def _results(arch, rows):
    return {"meta": {"arch": arch, "device": {"name": f"card {arch}"}, "ceilings": {}, "timing_policy": "test"},
            "rows": rows}  # fmt: skip


# A GEMM of arithmetic intensity 200 FLOP/B: compute-bound on an A100 (ridge ~153), memory-bound on a B200
# (ridge ~293), the example of solkit.sol.whatif's docstring; and a norm that is memory-bound everywhere.
GEMM = _row("gemm_bf16", "solkit", 1.0, {"bf16_tensor": 200e9}, 1e9, 0.8, bound="compute")
NORM = _row("rmsnorm", "solkit", 0.05, {"fp32_vector": 1e6}, 1e8, 0.9)


def test_what_if_section_flags_bound_changes():
    sec = what_if_section(_results("h200-sxm", [GEMM, NORM, {**NORM, "status": "error", "ms": None}]),
                          ["a100-sxm4-80gb", "b200"])  # fmt: skip
    assert sec["kind"] == "analysis" and len(sec["rows"]) == 2  # the failed row has no time: not carried over
    gemm, norm = sec["rows"]
    assert gemm["products"]["a100-sxm4-80gb"]["bound"] == "compute"
    assert gemm["products"]["b200"]["bound"] == "memory"
    assert gemm["bound_changes"] and not norm["bound_changes"]
    assert gemm["products"]["b200"]["tier"] is not None  # the measured fraction carried over as an assumption
    assert gemm["products"]["b200"]["t_sol_ms"] == pytest.approx(1e9 / 7.68e12 * 1e3, rel=1e-3)


def test_what_if_in_markdown_is_labelled_analysis(tmp_path):
    res = _results("h200-sxm", [GEMM, NORM])
    res["what_if"] = what_if_section(res, ["a100-sxm4-80gb", "b200"])
    md = markdown(res)
    assert "## What-if on a100-sxm4-80gb, b200 (analysis)" in md and "| gemm_bf16 * |" in md
    assert "1 of 2 measured rows change bound" in md
    paths = write_report(res, tmp_path)
    assert "id='what-if'" in paths["html"].read_text()
    assert json.loads(paths["json"].read_text())["what_if"]["products"] == ["a100-sxm4-80gb", "b200"]


def test_product_ids_one_line_error():
    assert product_ids("b200, a100-sxm4-80gb,b200") == ["b200", "a100-sxm4-80gb"]
    with pytest.raises(SolkitError, match=r"--what-if: unknown product id 'h300'; allowed: .*h200-sxm"):
        product_ids("b200,h300")


def test_compare_devices_uses_each_devices_own_sol():
    a = _results("h200-sxm", [GEMM, NORM])
    b = _results("a100-sxm4-80gb", [{**GEMM, "ms": 3.0, "sol_spec": 0.6}, {**NORM, "ms": 0.2, "sol_spec": 0.5},
                                    _row("softmax", "solkit", 1.0, {}, 1e6, 0.5)])  # fmt: skip
    rows = compare_devices([a, b])
    assert len(rows) == 2  # softmax ran on one card only
    gemm = next(r for r in rows if r["problem"] == "gemm_bf16")
    assert gemm["devices"]["h200-sxm"]["ms"] == 1.0 and gemm["devices"]["a100-sxm4-80gb"]["ms"] == 3.0
    assert gemm["sol_spread"] == pytest.approx(0.2) and gemm["best"] == "h200-sxm"
    assert "speedup" not in json.dumps(gemm)  # times are never compared across cards


def test_report_cli_across_devices(tmp_path, capsys):
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(_results("h200-sxm", [GEMM, NORM])))
    fb.write_text(json.dumps(_results("b200", [{**GEMM, "sol_spec": 0.7}, NORM])))
    assert main(["report", str(fa), str(fb), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["devices"] == {"h200-sxm": str(fa), "b200": str(fb)}
    assert {r["problem"] for r in d["rows"]} == {"gemm_bf16", "rmsnorm"}
    assert main(["report", str(fa), str(fb)]) == 0
    assert "SOL spread" in capsys.readouterr().out


def test_report_cli_what_if_and_bad_id(tmp_path, capsys):
    fa = tmp_path / "a.json"
    fa.write_text(json.dumps(_results("h200-sxm", [GEMM, NORM])))
    assert main(["report", str(fa), "--what-if", "a100-sxm4-80gb,b200", "--out", str(tmp_path / "r")]) == 0
    assert "what-if on a100-sxm4-80gb, b200 (analysis" in capsys.readouterr().out
    assert "(analysis)" in (tmp_path / "r" / "report.md").read_text()
    assert main(["report", str(fa), "--what-if", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--what-if" in err and "b200" in err


def test_report_rebuilds_a_minimal_results_file(tmp_path, capsys):
    # A hand-made file (no ceilings, no work totals, no timing policy) still rebuilds: empty roofline, no crash.
    rows = [{k: v for k, v in GEMM.items() if k != "flops_total"}]
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"meta": {"arch": "h200-sxm", "device": {"name": "x"}}, "rows": rows}))
    assert main(["report", str(f), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "roofline.png").stat().st_size > 0
