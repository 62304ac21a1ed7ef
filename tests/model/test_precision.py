"""solkit model --precision: the basis of T_SOL reaches the analysis and is labelled in every output."""

from __future__ import annotations

import json

import pytest

from solkit.cli import main

# A half-precision linear whose reference upcasts to fp32 for the product (the case, tiny).
ENTRY = """
import torch

class Upcast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(128, 128, dtype=torch.float16))

    def forward(self, x):
        return (x.float() @ self.weight.float().t()).to(torch.float16)

def make():
    return Upcast(), torch.randn(128, 128, dtype=torch.float16)
"""
BASE = ["model", "--entry", "upcast_net:make", "--device", "cpu", "--arch", "h200-sxm", "--mode", "fwd"]
BASE += ["--warmup", "1"]


def _run(capsys, *argv):
    assert main([*BASE, *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("flag,basis,unit", [("fastest", "fastest", "fp16_tensor"),
                                             ("as-written", "as_written", "fp32_vector")])  # fmt: skip
def test_precision_reaches_the_analysis_and_is_labelled(tmp_path, monkeypatch, capsys, flag, basis, unit):
    (tmp_path / "upcast_net.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = json.loads(_run(capsys, "--precision", flag, "--json", "--what-if", "b200", "--html", str(tmp_path / "r")))
    assert d["meta"]["precision"] == basis
    mm = next(o for o in d["ops"] if o["name"].startswith("mm "))
    flops = 2 * 128**3
    assert mm["flops"] == flops
    peak = d["ceilings"]["flops"][unit]
    want = max(flops / peak, mm["bytes"] / d["ceilings"]["bandwidth"]) * 1e3
    assert mm["t_sol_ms"] == pytest.approx(want, rel=1e-6)
    # 21 FLOP/B: above the fp32 SIMT ridge (~14), below the tensor-core one (~200)
    assert (mm["bound"] == "compute") == (unit == "fp32_vector")
    html = (tmp_path / "r" / "report.html").read_text()
    assert f"precision {basis}" in html and d["what_if"]["precision"] == basis
    table = _run(capsys, "--precision", flag)
    assert f"precision {basis}" in table
