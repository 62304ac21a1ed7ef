"""solkit.model.analyze on a CPU: tiny Llama and ResNet in every mode, counts by hand, attribution end to end."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("transformers")

from solkit.model import MODES, analyze  # noqa: E402
from solkit.sol.ceilings import spec_ceilings  # noqa: E402
from solkit.zoo import build  # noqa: E402

H200 = spec_ceilings("h200-sxm")  # fixed ceilings: the test needs no calibration of this CPU


@pytest.fixture(scope="module")
def reports():
    cache: dict = {}

    def get(family: str, mode: str):
        if (family, mode) not in cache:
            b = build(family, seq=12, batch=2)
            cache[family, mode] = analyze(b.model, b, mode=mode, ceilings=H200, warmup=1)
        return cache[family, mode]

    return get


def _rows(rep, op):
    return [r for r in rep.rows if r.op == op and r.match]


@pytest.mark.parametrize("family", ["llama", "resnet"])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_attributes_the_step(reports, family, mode):
    rep = reports(family, mode)
    s = rep.to_dict()["summary"]
    assert s["measured_ms"] > 0 and rep.rows
    # CPU op time: what no traced op claims is the dispatch overhead of composites (aten::linear around mm)
    assert s["attributed_share"] >= 0.85, [(r.op, r.time_s) for r in rep.rows if not r.match]
    assert 0 <= s["step_sol"] <= 1 and s["sum_t_sol_le_measured"] == (rep.t_sol_s <= rep.measured_s)
    assert s["analysis_overhead_s"] < rep.meta["step_s"] + 30  # the bound on what the analysis adds
    cats = {g.name for g in rep.categories}
    if family == "llama":
        assert {"attention", "mlp", "norms", "embeddings", "loss"} <= cats
        assert {g.name for g in rep.layers} >= {"layers.0", "layers.1"}
    else:
        assert "conv" in cats and "norms" in cats
    assert ("optimizer" in cats) == (mode == "train_step")
    assert any(r.backward for r in rep.rows) == (mode != "fwd")


def test_llama_linear_counts_by_hand(reports):
    rep = reports("llama", "fwd_bwd")
    tokens, hidden, inter = 2 * 12, 64, 160
    # the MLP's up projection, forward: 2 * tokens * hidden * inter on the fp32 unit, once per layer
    up = [r for r in _rows(rep, "mm") if not r.backward and r.shapes == ((tokens, hidden), (hidden, inter))]
    assert len(up) == 2 * 2  # gate_proj and up_proj in each of the 2 layers
    for r in up:
        assert sum(r.flops.values()) == 2 * tokens * hidden * inter
        assert r.category == "mlp" and r.module_type == "Linear" and r.layer.startswith("layers.")
    # its weight gradient in the backward: grad_out^T [inter, tokens] @ x [tokens, hidden]
    wgrad = [r for r in _rows(rep, "mm") if r.backward and r.shapes == ((inter, tokens), (tokens, hidden))]
    assert wgrad and all(sum(r.flops.values()) == 2 * tokens * hidden * inter for r in wgrad)
    assert all(r.category == "mlp" for r in wgrad)  # backward ops inherit the forward's module


def test_resnet_conv_counts_by_hand(reports):
    rep = reports("resnet", "fwd")
    b = build("resnet", seq=12, batch=2)
    stem = b.model.resnet.embedder.embedder.convolution  # 3 -> 8 channels, 7x7, stride 2, on 32x32
    cout, cin, kh, kw = stem.weight.shape
    hout = (32 + 2 * stem.padding[0] - kh) // stem.stride[0] + 1
    conv = [r for r in _rows(rep, "convolution") if r.shapes and r.shapes[1] == (cout, cin, kh, kw)]
    assert conv, [r.shapes for r in _rows(rep, "convolution")]
    assert sum(conv[0].flops.values()) == 2 * 2 * cout * hout * hout * cin * kh * kw
    assert conv[0].category == "conv"


def test_own_module_counts_by_hand():
    model = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.ReLU(), torch.nn.Conv1d(8, 6, 3))
    x = torch.randn(5, 8, 40)
    rep = analyze(model, x, mode="fwd", ceilings=H200, warmup=1)
    lin = [r for r in rep.rows if r.op in ("addmm", "mm") and r.match]
    assert sum(sum(r.flops.values()) for r in lin) >= 2 * 40 * 40 * 24  # 40 rows (5*8) x 40 -> 24
    conv = [r for r in rep.rows if r.op == "convolution" and r.match]
    # 2 * N * Cout * Lout * Cin * k + N * Cout * Lout (the bias)
    assert sum(conv[0].flops.values()) == 2 * 5 * 6 * 22 * 8 * 3 + 5 * 6 * 22
    assert conv[0].bytes >= 5 * 6 * 22 * 4 + 6 * 8 * 3 * 4  # writes the output, reads the weight (a parameter)


def test_wrong_input_shape_is_one_line():
    from solkit.errors import SolkitError

    with pytest.raises(SolkitError, match="tracing|the model failed") as info:
        analyze(torch.nn.Linear(8, 4), torch.randn(3, 5), mode="fwd", ceilings=H200)
    assert "\n" not in str(info.value)


def test_unknown_mode():
    from solkit.errors import SolkitError

    with pytest.raises(SolkitError, match="--mode"):
        analyze(torch.nn.Linear(8, 4), torch.randn(3, 8), mode="train", ceilings=H200)


@pytest.mark.skipif(not os.environ.get("SOLKIT_SLOW_TESTS"), reason="Inductor on CPU: ~60 s; SOLKIT_SLOW_TESTS=1")
def test_compile_on_cpu():
    class TinyMLP(torch.nn.Module):  # no __len__: an OptimizedModule of it has no truth value
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(32, 48), torch.nn.Linear(48, 16)

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    rep = analyze(TinyMLP(), torch.randn(8, 32), mode="train_step", compile=True, ceilings=H200)
    assert rep.meta["compile"] and rep.measured_s > 0
    gemms = [r for r in rep.rows if r.op in ("addmm", "mm") and r.match]  # extern GEMMs keep their aten op
    assert all(r.category == "mlp" for r in gemms if not r.backward)  # the module of the weight they read
    assert any(not r.backward for r in gemms) and any(r.backward for r in gemms)
    assert any(r.category == "optimizer" for r in rep.rows)


@pytest.mark.gpu
@pytest.mark.parametrize("compile", [False, True])
def test_llama_on_gpu(compile):
    b = build("llama", seq=256, batch=2, dtype=torch.bfloat16, device="cuda")
    rep = analyze(b.model, b, mode="train_step", compile=compile)
    s = rep.to_dict()["summary"]
    assert s["attributed_share"] >= 0.95, [(r.op, r.kernels, r.time_s) for r in rep.rows if not r.match][:10]
    assert s["sum_t_sol_le_measured"]
    if compile:
        assert any(r.kind == "region" and r.match == "inductor" for r in rep.rows)
