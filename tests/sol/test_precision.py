"""The precision policy: matrix work charged at the fastest unit the storage dtypes and tolerance allow."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.sol.analysis import analyze
from solkit.sol.ceilings import spec_ceilings
from solkit.sol.precision import Precision, parse_precision

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
UNIT = {BF16: "bf16_tensor", FP16: "fp16_tensor"}


def upcast_linear_gelu(x, w, b):
    return F.gelu(x.float() @ w.float().t() + b.float()).to(x.dtype)


def test_upcast_linear_gelu_from_the_issue_on_h200():
    m, k, n = 512, 2048, 8192
    ins = (((m, k), BF16), ((n, k), BF16), ((n,), BF16))
    c = spec_ceilings("h200-sxm")
    fast = analyze(upcast_linear_gelu, *ins, ceilings=c)
    old = analyze(upcast_linear_gelu, *ins, ceilings=c, precision="as_written", allow_tf32=False)
    gemm = 2 * m * n * k
    vector = fast.flops["fp32_vector"]  # the bias add and the gelu: elementwise fp32 work in both bases
    storage = 2 * (m * k + n * k + n + m * n)  # bf16 in and out; the fp32 copies are never materialised
    assert fast.flops == {"bf16_tensor": gemm, "fp32_vector": vector}
    assert old.flops == {"fp32_vector": gemm + vector}
    assert fast.fused_bytes == old.fused_bytes == storage
    expect_fast = max(gemm / c.flops["bf16_tensor"], vector / c.flops["fp32_vector"], storage / c.bandwidth)
    expect_old = max((gemm + vector) / c.flops["fp32_vector"], storage / c.bandwidth)
    assert fast.sol.t_sol_s == pytest.approx(expect_fast, rel=1e-12)
    assert old.sol.t_sol_s == pytest.approx(expect_old, rel=1e-12)
    assert fast.sol.t_sol_s < 20e-6 < 250e-6 < old.sol.t_sol_s  # ~17 µs on bf16 tensor cores, ~257 µs fp32 SIMT
    assert fast.precision == "fastest" and fast.to_dict()["precision"] == "fastest"
    assert old.to_dict()["precision"] == "as_written"


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("m,k,n", [(1, 8, 4), (33, 17, 65)])
def test_upcast_products_charge_the_storage_tensor_unit(m, k, n, dtype):
    for fn, ins, written in [
        (lambda a, b: a.float() @ b.float(), (((m, k), dtype), ((k, n), dtype)), "fp32_vector"),
        (lambda a, b: torch.bmm(a.double(), b.double()), (((2, m, k), dtype), ((2, k, n), dtype)), "fp64_tensor"),
        (lambda a, b: F.linear(a.float(), b.float()), (((m, k), dtype), ((n, k), dtype)), "fp32_vector"),
    ]:
        assert set(analyze(fn, *ins).flops) == {UNIT[dtype]}
        assert set(analyze(fn, *ins, precision="as_written", allow_tf32=False).flops) == {written}


def test_fp32_matmul_follows_the_matmul_switch_and_conv_the_cudnn_switch():
    mm = (((8, 16), FP32), ((16, 4), FP32))
    assert set(analyze(torch.mm, *mm, allow_tf32=False).flops) == {"fp32_vector"}
    assert set(analyze(torch.mm, *mm, allow_tf32=True).flops) == {"tf32_tensor"}
    conv = (((1, 3, 9, 9), FP32), ((4, 3, 3, 3), FP32))
    assert set(analyze(F.conv2d, *conv, allow_tf32=False, conv_tf32=True).flops) == {"tf32_tensor"}
    assert set(analyze(F.conv2d, *conv, allow_tf32=False, conv_tf32=False).flops) == {"fp32_vector"}
    # as written, a convolution follows the matmul switch (the behaviour before the policy)
    old = analyze(F.conv2d, *conv, allow_tf32=False, conv_tf32=True, precision="as_written")
    assert set(old.flops) == {"fp32_vector"}


def test_cudnn_default_allows_tf32_for_convolutions():
    assert Precision.current().conv_tf32 is bool(torch.backends.cudnn.allow_tf32)


def test_downcast_narrows_and_computed_operands_need_the_tolerance():
    ins = (((16, 32), FP32), ((32, 8), BF16))
    narrowed = analyze(lambda a, b: a.to(BF16).float() @ b.float(), *ins)  # rounded to bf16, then exact
    assert set(narrowed.flops) == {"bf16_tensor"}
    scaled = (((16, 32), BF16), ((32, 8), BF16))

    def fn(a, b):
        return (a.float() * 3.0) @ b.float()  # not a bf16 value any more: narrowing rounds it

    assert analyze(fn, *scaled, rtol=1e-2).flops["bf16_tensor"] == 2 * 16 * 8 * 32
    assert "bf16_tensor" not in analyze(fn, *scaled, rtol=1e-4, allow_tf32=False).flops


def test_mixed_storage_is_charged_at_what_both_fit_in():
    out = analyze(lambda a, b: a.float() @ b.float(), ((4, 8), BF16), ((8, 4), FP16), allow_tf32=False)
    assert set(out.flops) == {"fp32_vector"}
    out = analyze(lambda a, b: a.float() @ b, ((4, 8), BF16), ((8, 4), FP32), allow_tf32=True)
    assert set(out.flops) == {"tf32_tensor"}


def test_upcast_attention_is_charged_at_bf16():
    q = ((1, 2, 16, 8), BF16)
    out = analyze(lambda q, k, v: F.scaled_dot_product_attention(q.float(), k.float(), v.float()), q, q, q)
    assert set(out.flops) == {"bf16_tensor"}


def test_bad_precision_is_one_line():
    assert parse_precision("as-written") == "as_written"
    with pytest.raises(SolkitError, match="fastest, as-written"):
        parse_precision("fp8")
    with pytest.raises(SolkitError):
        analyze(torch.mm, ((2, 2), FP32), ((2, 2), FP32), precision="sloppy")


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_autocast_is_charged_per_op_as_dispatched(dtype):
    model = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(), torch.nn.Linear(20, 6))

    def step(x):
        with torch.autocast("cpu", dtype=dtype):  # meta tensors skip autocast; the trace makes its casts
            return torch.log_softmax(model(x), -1)

    for basis in ("fastest", "as_written"):
        a = analyze(step, ((5, 12), FP32), module=model, precision=basis, allow_tf32=False)
        assert a.flops[UNIT[dtype]] == 2 * 5 * (12 * 20 + 20 * 6) + 5 * (20 + 6)  # two GEMMs and their bias adds
        assert [t.dtype for t in a.outputs] == [FP32]  # log_softmax is on autocast's fp32 list
    # storage is fp32 (autocast's master weights): the casts are never materialised by a fused kernel
    assert a.fused_bytes == 4 * (5 * 12 + 12 * 20 + 20 + 20 * 6 + 6 + 5 * 6)
    plain = analyze(model, ((5, 12), FP32), allow_tf32=False)
    assert UNIT[dtype] not in plain.flops


def test_analyze_cli_precision_flag(tmp_path, capsys):
    import json

    from solkit.cli import main

    ref = "import torch\n\ndef run(a, b):\n    return (a.float() @ b.float()).to(a.dtype)\n"
    d = {
        "name": "upcast_gemm",
        "axes": {"M": {"type": "const", "value": 64}},
        "inputs": {"a": {"shape": ["M", "M"], "dtype": "bfloat16"}, "b": {"shape": ["M", "M"], "dtype": "bfloat16"}},
        "outputs": {"c": {"shape": ["M", "M"], "dtype": "bfloat16"}},
        "reference": ref,
    }
    (tmp_path / "definition.json").write_text(json.dumps(d))
    wl = {"uuid": "w", "axes": {}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}}}
    (tmp_path / "workload.jsonl").write_text(json.dumps(wl) + "\n")
    # one run (each spawns the isolated analysis child); the default basis is checked in-process above
    assert (
        main(["analyze", str(tmp_path), "--arch", "h200-sxm", "--tf32", "off", "--precision", "as-written", "--json"])
        == 0
    )
    [got] = json.loads(capsys.readouterr().out)
    assert got["precision"] == "as_written" and got["flops"] == {"fp32_vector": 2 * 64**3}
    assert got["fused_bytes"] == 3 * 2 * 64 * 64
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(tmp_path), "--precision", "fp8"])
    assert exc.value.code == 2
