"""Scoring and grouping of attributed rows, and the kernel advice data against the bench results it cites."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from solkit.model.advice import kernel_advice, kernel_for, kernel_table
from solkit.model.attribute import OpEvent
from solkit.model.report import build_report
from solkit.model.work import canonical, record_key, shape_key
from solkit.sol.ceilings import spec_ceilings

ROOT = Path(__file__).resolve().parents[2]
H200 = spec_ceilings("h200-sxm")
BW = H200.bandwidth


def _row(op, time_s, nbytes, **kw):
    return OpEvent(op=op, kind="aten", time_s=time_s, bytes=nbytes, counted=True, match="shapes", **kw)


@pytest.mark.parametrize("speed", [0.5, 1.0, 2.0])  # measured at half, equal to and twice the speed of light
def test_violations_are_flagged_and_capped(speed):
    t_sol = 1e9 / BW  # 1 GB at the datasheet bandwidth
    rows = [_row("add", t_sol / speed, 1e9, category="mlp", layer="layers.0"), _row("mul", 2 * t_sol, 1e9)]
    rep = build_report(rows, measured_s=t_sol / speed + 2 * t_sol, ceilings=H200, meta={})
    g = {o.name.split()[0]: o for o in rep.ops}
    assert g["add"].sol_fraction == pytest.approx(min(speed, 1.0))
    assert g["add"].violation == (speed > 1)
    assert g["add"].lost_s == pytest.approx(max(t_sol / speed - t_sol, 0.0))
    assert rep.attributed_share == pytest.approx(1.0)
    assert rep.step_sol <= 1.0 and rep.violation == (2 * t_sol > rep.measured_s)
    assert [x.name for x in rep.layers] == ["layers.0", "(outside layers)"]


def test_unattributed_time_counts_against_the_share():
    t_sol = 1e9 / BW
    lost = OpEvent(op="(kernels with no CPU launch)", kind="unattributed", time_s=2 * t_sol)
    rows = [_row("add", 2 * t_sol, 1e9), lost]
    rep = build_report(rows, measured_s=4 * t_sol, ceilings=H200, meta={})
    assert rep.attributed_share == pytest.approx(0.5) and rep.step_sol == pytest.approx(0.25)
    d = rep.to_dict()
    assert d["summary"]["top5_by_time_lost"][0].startswith("add")
    assert [o for o in d["ops"] if o["name"].startswith("(kernels")][0]["sol_fraction"] is None


@pytest.mark.parametrize(
    "name,canon",
    [
        ("aten::add_", "add"),
        ("aten::__and__", "__and__"),
        ("aten::_scaled_dot_product_efficient_attention", "scaled_dot_product_attention"),
        ("aten::_scaled_dot_product_cudnn_attention_backward", "scaled_dot_product_attention_backward"),
        ("aten::mm", "mm"),
    ],
)
def test_canonical_names(name, canon):
    assert canonical(name) == canon


def test_shape_keys_agree_between_profiler_and_trace():
    from solkit.sol.trace import OpRecord, TensorMeta

    x, w = TensorMeta((2, 8, 16, 16), None, ()), TensorMeta((4, 8, 3, 3), None, ())
    rec = OpRecord("convolution", "aten", "default", [x, w], [], {"input": x, "weight": w, "bias": None,
                   "stride": [2, 2], "padding": [1, 1]})  # fmt: skip
    profiled = [[2, 8, 16, 16], [4, 8, 3, 3], [], [], [], [], [], [], []]
    assert record_key(rec) == shape_key(profiled) == ((2, 8, 16, 16), (4, 8, 3, 3))


def test_advice_names_the_kernel():
    assert kernel_for("mm", "mlp", "Linear")["kernel"] == "solkit.kernels.gemm"
    assert kernel_for("mean", "norms", "LlamaRMSNorm")["kernel"] == "solkit.kernels.RMSNorm"
    assert kernel_for("nll_loss_forward", "loss", "")["kernel"] == "solkit.kernels.FusedLinearCrossEntropyLoss"
    assert kernel_for("embedding", "embeddings", "Embedding") is None
    text = kernel_advice("silu", "mlp", "LlamaMLP")
    assert "solkit.kernels.SwiGLU" in text and "x vs eager" in text and kernel_table()["source"] in text


def test_kernel_speedups_are_those_of_the_cited_results():
    table = kernel_table()
    rows = json.loads((ROOT / table["source"]).read_text())["rows"]
    ms = defaultdict(dict)
    for r in rows:
        if r["model"] == "llama3-8b" and r["status"] == "ok":
            ms[r["problem"]][r["backend"]] = r["ms"]
    for k in table["kernels"]:
        for base in ("eager", "compile"):
            for problem, x in k.get(f"speedup_vs_{base}", {}).items():
                assert x == pytest.approx(ms[problem][base] / ms[problem]["solkit"], abs=0.006), (k["kernel"], problem)


@pytest.mark.parametrize("wall_ratio,consistent", [(2.0, True), (1.0, True), (0.5, False)])
def test_kernel_time_above_the_wall_time_is_flagged(wall_ratio, consistent):
    # The H200 run that counted the profiler's annotations twice had 248.8 ms of "kernel time" in a 171 ms step.
    t_sol = 1e9 / BW
    rep = build_report([_row("add", 2 * t_sol, 1e9)], measured_s=2 * t_sol, ceilings=H200, meta={})
    rep.wall_s = wall_ratio * 2 * t_sol
    assert rep.to_dict()["summary"]["measured_le_wall"] is consistent
