"""analyze() end to end: a full Llama decoder layer, fused bytes, speed, T_SOL, problems and overrides."""

from __future__ import annotations

import json
import math
import resource
import time

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.sol.analysis import ShapeSpec, analyze, analyze_problem, apply_declared
from solkit.sol.model import Ceilings

BF16 = torch.bfloat16


def spec(*shape, dtype=BF16, grad=False):
    return ShapeSpec(tuple(shape), dtype, grad)


# ---------------------------------------------------------------------------------------------- Llama layer


def rmsnorm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_decoder_layer(x, attn_norm, wq, wk, wv, wo, ffn_norm, wg, wu, wd, cos, sin, n_heads, n_kv_heads):
    """One Llama-2/3 decoder layer (pre-norm, GQA, RoPE, causal SDPA, SwiGLU), written out in torch."""
    b, s, hid = x.shape
    hd = hid // n_heads
    xn = rmsnorm(x, attn_norm)
    q = F.linear(xn, wq).view(b, s, n_heads, hd).transpose(1, 2)
    k = F.linear(xn, wk).view(b, s, n_kv_heads, hd).transpose(1, 2)
    v = F.linear(xn, wv).view(b, s, n_kv_heads, hd).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    h = x + F.linear(attn.transpose(1, 2).reshape(b, s, hid), wo)
    hn = rmsnorm(h, ffn_norm)
    return h + F.linear(F.silu(F.linear(hn, wg)) * F.linear(hn, wu), wd)


@pytest.mark.parametrize("b,s,hid,heads,kv,ffn", [(2, 16, 64, 4, 2, 176), (1, 33, 96, 6, 6, 256)])
def test_llama_decoder_layer_forward(b, s, hid, heads, kv, ffn):
    hd = hid // heads
    t = b * s
    inputs = [
        spec(b, s, hid),
        spec(hid),
        spec(heads * hd, hid),
        spec(kv * hd, hid),
        spec(kv * hd, hid),
        spec(hid, heads * hd),
        spec(hid),
        spec(ffn, hid),
        spec(ffn, hid),
        spec(hid, ffn),
        spec(s, hd),
        spec(s, hd),
    ]
    a = analyze(llama_decoder_layer, *inputs, n_heads=heads, n_kv_heads=kv)

    gemms = 2 * t * hid * (heads * hd + 2 * kv * hd) + 2 * t * heads * hd * hid + 3 * 2 * t * hid * ffn
    attention = 4 * b * heads * s * s * hd // 2  # causal
    norms = 2 * (4 * t * hid + 2 * t)  # two RMSNorms: 4 per element + eps and rsqrt per row
    rope = (3 * b * heads * s * hd + b * heads * s * hd // 2) + (3 * b * kv * s * hd + b * kv * s * hd // 2)
    residuals = 2 * t * hid
    swiglu = 5 * t * ffn
    assert a.flops == {"bf16_tensor": gemms + attention, "fp32_vector": norms + rope + residuals + swiglu}
    assert a.uncounted == []

    weights = 2 * hid + hid * (heads * hd + 2 * kv * hd) + heads * hd * hid + 3 * hid * ffn
    assert a.fused_bytes == 2 * (t * hid + weights + 2 * s * hd + t * hid)
    assert a.unfused_bytes > a.fused_bytes
    ops = {o.op: o for o in a.ops}
    assert ops["aten.mm"].count == 7 and ops["solkit.scaled_dot_product_attention"].count == 1


# ---------------------------------------------------------------------------------------------- fused bytes


CASES = {
    "gemm": (torch.mm, [spec(33, 17), spec(17, 9)]),
    "gemm_bias_fp32": (F.linear, [spec(8, 16, dtype=torch.float32), spec(4, 16, dtype=torch.float32)]),
    "mixed_dtypes": (lambda x, i: x.float()[i].sum(0), [spec(50, 8), spec(7, dtype=torch.long)]),
    "scalar_args": (lambda x, alpha: x * alpha + 1.5, [spec(5, 5), 0.25]),
    "two_outputs": (lambda x: (x.float().softmax(-1), x.amax(-1)), [spec(3, 10)]),
    "repeated_input": (lambda x: x @ x, [spec(12, 12)]),
    "cross_entropy": (F.cross_entropy, [spec(16, 100), spec(16, dtype=torch.long)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_bytes_is_the_exact_sum_of_inputs_and_outputs(case):
    fn, inputs = CASES[case]
    a = analyze(fn, *inputs)
    tensor_specs = {id(x): x for x in inputs if isinstance(x, ShapeSpec)}.values()  # each input once
    in_bytes = sum(math.prod(x.shape) * x.dtype.itemsize for x in tensor_specs)
    out_bytes = sum(t.numel * t.dtype.itemsize for t in a.outputs)
    assert a.fused_bytes == in_bytes + out_bytes
    assert a.fused_bytes == sum(t.nbytes for t in a.inputs) + sum(t.nbytes for t in a.outputs)


def test_input_forms_are_equivalent():
    want = analyze(torch.mm, spec(8, 4), spec(4, 2))
    for ins in [
        [((8, 4), BF16), ((4, 2), BF16)],
        [torch.empty(8, 4, dtype=BF16), torch.empty(4, 2, dtype=BF16)],
        [torch.empty(8, 4, dtype=BF16, device="meta"), spec(4, 2)],
    ]:
        got = analyze(torch.mm, *ins)
        assert (got.flops, got.fused_bytes, got.unfused_bytes) == (want.flops, want.fused_bytes, want.unfused_bytes)


# ---------------------------------------------------------------------------------------------- speed, memory


def test_huge_problems_analyse_fast_without_allocating():
    """Done-when: < 1 s each on the 2-core CI machine, no tensor storage.

    The first trace in a process imports PyTorch's Python meta kernels (a one-time ~1-3 s), so a
    small warm-up runs first; the timed calls are the analyses themselves.
    """
    analyze(F.cross_entropy, spec(4, 8), spec(4, dtype=torch.long))
    analyze(torch.mm, spec(4, 4), spec(4, 4))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    ce = analyze(F.cross_entropy, spec(16384, 128256), spec(16384, dtype=torch.long))
    t1 = time.perf_counter()
    gemm = analyze(torch.mm, spec(8192, 8192), spec(8192, 28672))
    t2 = time.perf_counter()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    assert t1 - t0 < 1.0 and t2 - t1 < 1.0, (t1 - t0, t2 - t1)
    assert grown < 64 * 2**20
    assert ce.flops == {"fp32_vector": 5 * 16384 * 128256 + 16384}
    assert ce.fused_bytes == 2 * 16384 * 128256 + 8 * 16384 + 2
    assert gemm.flops == {"bf16_tensor": 2 * 8192 * 28672 * 8192}


# ---------------------------------------------------------------------------------------------- T_SOL


CEIL = Ceilings(
    arch="test-gpu",
    basis="spec",
    flops={"bf16_tensor": 1e15, "fp32_vector": 5e13, "tf32_tensor": 5e14},
    bandwidth=4e12,
)


def test_t_sol_compute_bound_gemm():
    m = n = k = 8192
    a = analyze(torch.mm, spec(m, k), spec(k, n), ceilings=CEIL)
    assert a.sol.bound == "compute"
    assert a.sol.t_sol_s == pytest.approx(2 * m * n * k / 1e15)
    assert a.t_sol(CEIL).t_sol_s == a.sol.t_sol_s


def test_t_sol_memory_bound_softmax_uses_fused_bytes():
    a = analyze(lambda x: torch.softmax(x, -1), spec(4096, 4096), ceilings=CEIL)
    assert a.sol.bound == "memory"
    assert a.sol.t_sol_s == pytest.approx(2 * 2 * 4096 * 4096 / 4e12)


def test_t_sol_on_a_database_arch():
    a = analyze(torch.mm, spec(8192, 8192), spec(8192, 8192), arch="h200-sxm")
    assert a.sol.arch == "h200-sxm" and a.sol.bound == "compute"
    assert a.sol.t_sol_ms == pytest.approx(2 * 8192**3 / 989.4e12 * 1e3, rel=0.01)


def test_per_arch_skips_archs_without_the_unit():
    fp8 = torch.float8_e4m3fn
    a = analyze(lambda x, w: torch._scaled_mm(x, w.t(), torch.ones(()), torch.ones(())), spec(64, 32, dtype=fp8),
                spec(48, 32, dtype=fp8))  # fmt: skip
    results = a.per_arch()
    assert "h200-sxm" in results and "a100-sxm4-80gb" not in results  # no fp8 on Ampere


def test_apply_declared_reports_disagreement_over_one_percent():
    a = analyze(torch.mm, spec(100, 100), spec(100, 100))
    traced = a.flops_total
    apply_declared(a, {"bf16_tensor": traced * 1.005}, a.fused_bytes)  # within 1 %: silent
    assert a.disagreements == [] and a.flops == {"bf16_tensor": round(traced * 1.005)}
    apply_declared(a, {"bf16_tensor": traced * 1.5}, a.fused_bytes * 2)
    assert len(a.disagreements) == 2 and "+50.0%" in a.disagreements[0]
    assert a.traced_flops == {"bf16_tensor": traced} and a.fused_bytes == 2 * a.traced_fused_bytes


# ---------------------------------------------------------------------------------------------- problems


RMSNORM_REF = (
    "import torch\n\n@torch.no_grad()\ndef run(hidden_states, weight):\n    x = hidden_states.float()\n"
    "    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)\n"
    "    return (y * weight.float()).to(hidden_states.dtype)\n"
)


def write_problem(root, definition: dict, workloads: list[dict]):
    root.mkdir(parents=True, exist_ok=True)
    (root / "definition.json").write_text(json.dumps(definition))
    (root / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    return root


def rmsnorm_problem(root, solkit_hints=None):
    d = {
        "name": "rmsnorm_bf16_h4096",
        "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
        "inputs": {
            "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
            "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
        },
        "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
        "reference": RMSNORM_REF,
    }
    if solkit_hints:
        d["solkit"] = solkit_hints
    wls = [
        {"uuid": f"w{m}", "axes": {"batch_size": m}, "inputs": {"hidden_states": {"type": "random"}}} for m in (1, 8192)
    ]
    return write_problem(root, d, wls)


def test_analyze_problem_matches_the_reference_doc_example(tmp_path):
    res = analyze_problem(rmsnorm_problem(tmp_path), arch="h200-sxm")
    assert [r.uuid for r in res] == ["w1", "w8192"]
    big = res[1]
    assert big.axes == {"hidden_size": 4096, "batch_size": 8192}
    assert big.analysis.fused_bytes == 2 * (2 * 8192 * 4096 + 4096)
    assert big.analysis.sol.t_sol_ms * 1e3 == pytest.approx(27.96, abs=0.01)  # µs, at 4.8 TB/s
    d = big.to_dict()
    for key in ("uuid", "axes", "flops_total", "flops", "fused_bytes", "unfused_bytes", "t_sol_ms", "bound"):
        assert key in d
    assert d["arch"] == "h200-sxm" and d["basis"] == "spec" and d["uncounted"] == []


def test_declared_counts_win_and_both_are_reported(tmp_path):
    hints = {"flops": {"fp32_vector": "4*batch_size*hidden_size"}, "bytes": "4*batch_size*hidden_size + 2*hidden_size"}
    res = analyze_problem(rmsnorm_problem(tmp_path, hints), ceilings=CEIL)
    a = res[1].analysis
    m, n = 8192, 4096
    assert a.flops == {"fp32_vector": 4 * m * n} and a.traced_flops == {"fp32_vector": 4 * m * n + 2 * m}
    assert a.disagreements == []  # 2*M extra is far below 1 %
    assert a.fused_bytes == a.traced_fused_bytes
    hints = {"flops": {"bf16_tensor": "2*batch_size*hidden_size*hidden_size"}}
    a = analyze_problem(rmsnorm_problem(tmp_path, hints), ceilings=CEIL)[1].analysis
    assert a.flops == {"bf16_tensor": 2 * m * n * n} and "flops: declared" in a.disagreements[0]
    assert a.sol.bound == "compute"


def test_bad_declared_unit_names_the_field(tmp_path):
    with pytest.raises(SolkitError, match=r"solkit\.flops.*unknown math unit 'bf17_tensor'"):
        analyze_problem(rmsnorm_problem(tmp_path, {"flops": {"bf17_tensor": "1"}}))


def test_scalar_inputs_count_nothing(tmp_path):
    d = {
        "name": "scale",
        "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "alpha": {"shape": None, "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": "def run(x, alpha):\n    return x * alpha\n",
    }
    wl = {
        "uuid": "u",
        "axes": {"n": 1000},
        "inputs": {"x": {"type": "random"}, "alpha": {"type": "scalar", "value": 3}},
    }
    (r,) = analyze_problem(write_problem(tmp_path, d, [wl]))
    assert r.analysis.fused_bytes == 2 * 4 * 1000
    assert r.analysis.flops == {"fp32_vector": 1000}
    assert r.analysis.sol is None  # no arch, no ceilings: counts only


def test_analyze_workload_and_empty_problem(tmp_path):
    from solkit.problems.loader import load_problem
    from solkit.sol.analysis import analyze_workload

    problem = load_problem(rmsnorm_problem(tmp_path / "p"))
    r = analyze_workload(problem, problem.workloads[1], ceilings=CEIL)
    assert r.uuid == "w8192" and r.analysis.sol.bound == "memory"
    assert r.analysis.flops == {"fp32_vector": 4 * 8192 * 4096 + 2 * 8192}
    empty = rmsnorm_problem(tmp_path / "q")
    (empty / "workload.jsonl").write_text("")
    with pytest.raises(SolkitError, match="no workloads"):
        analyze_problem(empty)


@pytest.mark.parametrize("dtype, size", [(torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2)])
@pytest.mark.parametrize("declared", [False, True])
def test_analyze_workload_in_another_dtype_counts_that_dtype(tmp_path, dtype, size, declared):
    """A run that casts the inputs (``bench --dtype``) is charged the bytes of the dtype it runs in; counts declared
    for the definition's dtypes are not applied to it."""
    from solkit.problems.loader import load_problem
    from solkit.sol.analysis import analyze_workload

    hints = {"bytes": "4*batch_size*hidden_size + 2*hidden_size"} if declared else None
    problem = load_problem(rmsnorm_problem(tmp_path / "p", hints))
    m, n = 8192, 4096
    a = analyze_workload(problem, problem.workloads[1], dtype=dtype).analysis
    assert a.fused_bytes == size * (2 * m * n + n)
    assert bool(a.declared) == (declared and dtype == torch.bfloat16)
