"""solkit model --what-if: every operator's T_SOL, bound and tier on other products, and the step's sum on each."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from solkit.cli import main  # noqa: E402
from solkit.sol.ceilings import spec_ceilings  # noqa: E402

TINY = ["model", "--hf", "llama", "--seq", "8", "--batch", "2", "--device", "cpu", "--arch", "h200-sxm"]
TINY += ["--warmup", "1", "--mode", "fwd"]
PRODUCTS = ["a100-sxm4-80gb", "b200"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("whatif") / "report"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*TINY, "--what-if", ",".join(PRODUCTS), "--top", "1000", "--json", "--html", str(out)])
    assert rc == 0
    return json.loads(buf.getvalue()), out


def test_every_counted_operator_on_each_product(report):
    d, _ = report
    w = d["what_if"]
    assert w["products"] == PRODUCTS and w["measured_on"] == "h200-sxm" and w["kind"] == "analysis"
    with_work = [o for o in d["ops"] if o["t_sol_ms"]]
    assert with_work and all(set(o["what_if"]) == set(PRODUCTS) for o in with_work)
    for p in PRODUCTS:  # the step's sum is the sum of its operators' (every op row is listed: --top 1000)
        total = sum(o["what_if"][p]["t_sol_ms"] for o in d["ops"] if o.get("what_if"))
        assert w["step"][p]["t_sol_ms"] == pytest.approx(total, rel=1e-9)
        assert w["step"][p]["unavailable_calls"] == 0
    # the B200's bandwidth beats the A100's: every memory-bound op is faster there
    assert w["step"]["b200"]["t_sol_ms"] < w["step"]["a100-sxm4-80gb"]["t_sol_ms"]


def test_an_operator_by_hand(report):
    """An mm (memory-bound at these shapes) on the A100: calls x max(FLOPs / fp32 peak, bytes / bandwidth)."""
    d, _ = report
    mm = next(o for o in d["ops"] if o["name"].startswith("mm ") and o.get("what_if"))
    a100 = spec_ceilings("a100-sxm4-80gb")
    flops_unit = "fp32_vector"  # fp32 on the fastest basis with TF32 matmuls off: the SIMT unit
    want = max(mm["flops"] / a100.flops[flops_unit], mm["bytes"] / a100.bandwidth) * 1e3
    cell = mm["what_if"]["a100-sxm4-80gb"]
    assert cell["t_sol_ms"] == pytest.approx(want, rel=1e-6) and cell["bound"] == "memory"
    assert cell["tier"] == mm["tier"]  # the fraction measured here, carried over


def test_table_and_html(report, capsys):
    _, out = report
    text = (out / "report.html").read_text()
    assert "id='what-if'" in text and "What-if on a100-sxm4-80gb, b200 (analysis, precision fastest)" in text
    assert main([*TINY, "--what-if", "b200", "--top", "3"]) == 0
    shown = capsys.readouterr().out
    assert "What-if on b200" in shown and "step (sum of T_SOL)" in shown and "what-if b200: sum of T_SOL" in shown


def test_bad_product_is_one_line_exit_2(capsys):
    assert main([*TINY, "--what-if", "h200-sxm,z9000", "--json"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("USDT")]
    assert len(err) == 1 and "--what-if: unknown product id 'z9000'" in err[0]
