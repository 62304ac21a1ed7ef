"""The committed H200 example (benchmarks/results/profile/2026-11-30_h200_example): re-diagnosing its saved raw outputs
on the CPU gives the diagnosis the issue asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from solkit.profile.report import to_html, to_markdown
from solkit.profile.runner import rebuild

RAW = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "profile" / "2026-11-30_h200_example" / "raw"


@pytest.fixture(scope="module")
def report():
    return rebuild(RAW)


def _codes(diag):
    out = {f["code"] for f in diag["findings"]}
    for k in diag["kernels"]:
        out |= {f["code"] for f in k["findings"]}
    return out


def test_every_target_has_kernels_and_a_sol_fraction(report):
    assert report["ceilings"]["arch"] == "h200-sxm"
    assert len(report["targets"]) == 8
    for t in report["targets"]:
        d = t["diagnosis"]
        assert d["n_kernels"] >= 1, t["label"]
        assert 0 < d["sol"]["sol_fraction"] <= 1 and not d["sol"]["violation"]
        assert d["sol"]["tier"]["label"]


def test_eager_references_need_fusion_and_solkit_kernels_do_not(report):
    by = {t["label"]: t["diagnosis"] for t in report["targets"]}
    for eager in ("rmsnorm.reference", "softmax.reference", "o_proj_residual.reference"):
        assert "excess_dram_traffic" in _codes(by[eager]), eager
        assert by[eager]["sol"]["sol_fraction"] < by[eager.replace("reference", "solkit")]["sol"]["sol_fraction"]
    for fused in ("rmsnorm.solkit", "softmax.solkit"):
        assert by[fused]["n_kernels"] == 1 and "excess_dram_traffic" not in _codes(by[fused])
    for gemm in ("gemm_bf16.reference", "gemm_bf16.solkit"):
        k = by[gemm]["kernels"][0]
        assert k["roof"] == "compute roof" and k["tensor_pipe_pct"] > 85
        assert by[gemm]["tensor_flops_vs_model"] == pytest.approx(1.0)
        assert "tile_rereads" in _codes(by[gemm]) and "no_mma" not in _codes(by[gemm])
    # the tiny [8192, 1] kernels of eager RMSNorm are launch-bound, not register-bound
    assert "register_pressure" not in _codes(by["rmsnorm.reference"])
    assert "tiny_kernel" in _codes(by["rmsnorm.reference"])


def test_renders(report):
    md = to_markdown(report)
    assert "rmsnorm.reference" in md and "Findings" in md
    assert "<table>" in to_html(report)


def test_cli_from_dir(tmp_path, capsys):
    from solkit.cli import main

    assert main(["profile", "--from-dir", str(RAW), "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert '"rmsnorm.reference"' in captured.out and "throttled" in captured.err
    assert (tmp_path / "profile.html").exists()
    assert main(["profile", "--from-dir", str(RAW), str(RAW)]) == 2
    assert main(["profile", "--from-dir", str(tmp_path / "nothing")]) == 2


def test_html_is_well_formed(report):
    from html.parser import HTMLParser

    class Check(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag not in ("meta", "br"):
                self.stack.append(tag)

        def handle_endtag(self, tag):
            assert self.stack and self.stack.pop() == tag, tag

    c = Check()
    c.feed(to_html(report))
    assert c.stack == []


def test_rebuild_adds_the_op_by_op_model_from_the_suite(report):
    by = {t["label"]: t["diagnosis"] for t in report["targets"]}
    # eager RMSNorm moves about what op-by-op execution predicts; eager softmax moves more (re-reads)
    eager = by["rmsnorm.reference"]
    assert eager["model_unfused_bytes"] == pytest.approx(1.208e9, rel=1e-3)
    assert 0.8 < eager["dram_bytes"] / eager["model_unfused_bytes"] < 1.0
    softmax = by["softmax.reference"]
    assert softmax["dram_bytes"] > 1.2 * softmax["model_unfused_bytes"]
    assert "op-by-op" in softmax["findings"][0]["message"]
