"""Exact FLOP and byte counts per op class (formulas written out independently of the rules)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.sol.analysis import ShapeSpec, analyze
from solkit.sol.counting import count_op, rule_table, tensor_unit, vector_unit
from solkit.sol.trace import trace

BF16, F32 = torch.bfloat16, torch.float32


def spec(*shape, dtype=BF16, grad=False):
    return ShapeSpec(tuple(shape), dtype, grad)


def calls(a, op):
    return [c for c in a.calls if c.op == op]


# ---------------------------------------------------------------------------------------------- GEMM


@pytest.mark.parametrize("m,n,k", [(128, 96, 64), (127, 33, 65), (1, 4096, 4096)])
def test_gemm(m, n, k):
    a = analyze(lambda x, w: x @ w, spec(m, k), spec(k, n))
    assert a.flops == {"bf16_tensor": 2 * m * n * k}
    assert a.fused_bytes == 2 * (m * k + k * n + m * n)
    assert a.unfused_bytes == a.fused_bytes  # a single op
    assert a.uncounted == []


@pytest.mark.parametrize("m,n,k", [(64, 48, 32), (17, 9, 33)])
def test_gemm_with_bias_counts_the_bias_add(m, n, k):
    a = analyze(lambda x, w, b: F.linear(x, w, b), spec(m, k), spec(n, k), spec(n))
    assert a.flops == {"bf16_tensor": 2 * m * n * k + m * n}
    assert [c.op for c in a.calls if c.flops] == ["aten.addmm"]
    assert a.fused_bytes == 2 * (m * k + n * k + n + m * n)


def test_gemm_with_residual_adds_vector_work():
    m, n, k = 64, 80, 48
    a = analyze(lambda x, w, r: x @ w + r, spec(m, k), spec(k, n), spec(m, n))
    assert a.flops == {"bf16_tensor": 2 * m * n * k, "fp32_vector": m * n}
    assert a.fused_bytes == 2 * (m * k + k * n + m * n + m * n)
    # op by op: the GEMM writes its output, the add reads it back with the residual and writes again
    assert a.unfused_bytes == 2 * (m * k + k * n + m * n) + 2 * 3 * m * n


def test_addmm_beta_zero_adds_nothing():
    m, n, k = 8, 16, 32
    a = analyze(lambda c, x, w: torch.addmm(c, x, w, beta=0), spec(m, n), spec(m, k), spec(k, n))
    assert a.flops == {"bf16_tensor": 2 * m * n * k}


@pytest.mark.parametrize("b,m,n,k", [(4, 32, 16, 8), (3, 7, 5, 9)])
def test_bmm_and_batched_matmul(b, m, n, k):
    a = analyze(torch.bmm, spec(b, m, k), spec(b, k, n))
    assert a.flops == {"bf16_tensor": 2 * b * m * n * k}
    # 3-D @ 2-D folds the batch into M: same work
    a2 = analyze(torch.matmul, spec(b, m, k), spec(k, n))
    assert a2.flops == {"bf16_tensor": 2 * b * m * n * k}


def test_baddbmm_counts_the_add():
    b, m, n, k = 2, 4, 6, 8
    a = analyze(torch.baddbmm, spec(b, m, n), spec(b, m, k), spec(b, k, n))
    assert a.flops == {"bf16_tensor": 2 * b * m * n * k + b * m * n}


def test_linear_backward_is_two_gemms():
    m, n, k = 64, 32, 48

    def fwd_bwd(x, w, g):
        y = F.linear(x, w)
        return torch.autograd.grad(y, (x, w), g)

    a = analyze(fwd_bwd, spec(m, k, grad=True), spec(n, k, grad=True), spec(m, n))
    mms = calls(a, "aten.mm")
    assert len(mms) == 3  # forward, grad_input = g @ w, grad_weight = g^T @ x
    assert all(c.flops == {"bf16_tensor": 2 * m * n * k} for c in mms)
    assert a.flops == {"bf16_tensor": 3 * 2 * m * n * k}
    assert [o.shape for o in a.outputs] == [(m, k), (n, k)]


@pytest.mark.parametrize("allow_tf32,unit", [(True, "tf32_tensor"), (False, "fp32_vector")])
def test_fp32_gemm_unit_follows_the_tf32_policy(allow_tf32, unit):
    a = analyze(torch.mm, spec(16, 8, dtype=F32), spec(8, 4, dtype=F32), allow_tf32=allow_tf32)
    assert a.flops == {unit: 2 * 16 * 4 * 8}
    assert a.allow_tf32 is allow_tf32


def test_tf32_default_reads_torch_policy():
    # Set and restore by hand: torch's cuBLAS module answers getattr through __getattr__, which
    # monkeypatch's undo does not always see, leaving teardown to fail.
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        assert analyze(torch.mm, spec(4, 4, dtype=F32), spec(4, 4, dtype=F32)).flops == {"tf32_tensor": 128}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize(
    "dtype,unit",
    [(torch.float16, "fp16_tensor"), (torch.float64, "fp64_tensor"), (torch.float8_e4m3fn, "fp8_tensor")],
)
def test_gemm_unit_by_operand_dtype(dtype, unit):
    assert tensor_unit(dtype, False) == unit


def test_scaled_mm_goes_to_the_fp8_unit():
    m, n, k = 64, 48, 32
    fn = lambda a, b, sa, sb: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=BF16)  # noqa: E731
    fp8 = torch.float8_e4m3fn
    a = analyze(fn, spec(m, k, dtype=fp8), spec(n, k, dtype=fp8), spec(dtype=F32), spec(dtype=F32))
    assert a.flops == {"fp8_tensor": 2 * m * n * k}
    assert a.fused_bytes == m * k + n * k + 4 + 4 + 2 * m * n


# ---------------------------------------------------------------------------------------------- conv


@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d(groups):
    n, cin, h, w, cout, kh = 2, 4, 15, 16, 8, 3
    a = analyze(
        lambda x, wt, b: F.conv2d(x, wt, b, padding=1, groups=groups),
        spec(n, cin, h, w, dtype=F32),
        spec(cout, cin // groups, kh, kh, dtype=F32),
        spec(cout, dtype=F32),
        allow_tf32=True,
    )
    out = n * cout * h * w
    assert a.flops == {"tf32_tensor": 2 * out * (cin // groups) * kh * kh + out}


def test_conv_transpose2d():
    n, cin, h, w, cout, kh = 2, 4, 8, 8, 6, 3
    a = analyze(lambda x, wt: F.conv_transpose2d(x, wt, stride=2), spec(n, cin, h, w), spec(cin, cout, kh, kh))
    assert a.flops == {"bf16_tensor": 2 * (n * cin * h * w) * cout * kh * kh}


# ---------------------------------------------------------------------------------------------- attention


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,h,s,d", [(2, 4, 128, 64), (1, 3, 17, 40)])
def test_sdpa(causal, b, h, s, d):
    a = analyze(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        spec(b, h, s, d),
        spec(b, h, s, d),
        spec(b, h, s, d),
    )
    full = 4 * b * h * s * s * d
    assert a.flops == {"bf16_tensor": full // 2 if causal else full}
    assert a.fused_bytes == 4 * b * h * s * d * 2
    (c,) = calls(a, "solkit.scaled_dot_product_attention")
    assert ("causal: halved" in c.note) is causal


def test_sdpa_gqa_and_cross_attention_use_query_heads_and_key_length():
    b, h, hkv, sq, sk, d = 2, 8, 2, 16, 48, 32
    a = analyze(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        spec(b, h, sq, d),
        spec(b, hkv, sk, d),
        spec(b, hkv, sk, d),
    )
    assert a.flops == {"bf16_tensor": 4 * b * h * sq * sk * d}


def test_sdpa_with_explicit_mask_is_not_halved():
    b, h, s, d = 1, 2, 32, 16
    a = analyze(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        spec(b, h, s, d),
        spec(b, h, s, d),
        spec(b, h, s, d),
        spec(s, s, dtype=torch.bool),
    )
    assert a.flops == {"bf16_tensor": 4 * b * h * s * s * d}


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_is_two_and_a_half_forwards(causal):
    b, h, s, d = 2, 2, 64, 32

    def fwd_bwd(q, k, v, g):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.autograd.grad(o, (q, k, v), g)

    a = analyze(fwd_bwd, *[spec(b, h, s, d, grad=True)] * 3, spec(b, h, s, d))
    fwd = 4 * b * h * s * s * d // (2 if causal else 1)
    (bwd,) = calls(a, "solkit.scaled_dot_product_attention_backward")
    assert bwd.flops == {"bf16_tensor": fwd * 5 // 2}
    assert a.flops == {"bf16_tensor": fwd + fwd * 5 // 2}


@pytest.mark.parametrize("causal", [False, True])
def test_aten_attention_kernels(causal):
    b, h, s, d = 2, 4, 32, 16
    full = 4 * b * h * s * s * d
    want = {"bf16_tensor": full // 2 if causal else full}
    bhsd = [spec(b, h, s, d)] * 3
    bshd = [spec(b, s, h, d)] * 3
    aten = torch.ops.aten
    kernels = [
        (lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, is_causal=causal), bhsd),
        (lambda q, k, v: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, is_causal=causal), bhsd),
        (lambda q, k, v: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, is_causal=causal), bhsd),
        (lambda q, k, v: aten._flash_attention_forward(q, k, v, None, None, s, s, 0.0, causal, False), bshd),
    ]
    for fn, ins in kernels:
        assert analyze(fn, *ins).flops == want


def test_math_decomposition_counts_its_two_bmm():
    """Attention written out by hand counts the same 4*B*H*S*S*D on the tensor unit (plus softmax)."""
    b, h, s, d = 2, 3, 16, 8

    def attention(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * d**-0.5, dim=-1)
        return p @ v

    a = analyze(attention, *[spec(b, h, s, d)] * 3)
    assert a.flops["bf16_tensor"] == 4 * b * h * s * s * d
    assert a.flops["fp32_vector"] == b * h * s * s * (1 + 5)  # scale, softmax


# ---------------------------------------------------------------------------------------------- vector ops


@pytest.mark.parametrize("m,n", [(8, 4096), (5, 33)])
def test_rmsnorm_written_out(m, n):
    def rmsnorm(x, w):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        return (y * w.float()).to(x.dtype)

    a = analyze(rmsnorm, spec(m, n), spec(n))
    # pow 1, mean 1, *rstd 1, *w 1 per element; + eps and rsqrt once per row
    assert a.flops == {"fp32_vector": 4 * m * n + 2 * m}
    assert a.fused_bytes == 2 * m * n + 2 * n + 2 * m * n


@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(affine):
    m, n = 16, 96
    if affine:
        a = analyze(lambda x, w, b: F.layer_norm(x, (n,), w, b), spec(m, n), spec(n), spec(n))
    else:
        a = analyze(lambda x: F.layer_norm(x, (n,)), spec(m, n))
    assert a.flops == {"fp32_vector": (7 if affine else 5) * m * n}
    # the fused kernel's mean and rstd (fp32, one per row) are written op by op but are not outputs
    assert a.unfused_bytes == a.fused_bytes + 2 * 4 * m


def test_layernorm_backward():
    m, n = 8, 32

    def fwd_bwd(x, w, b, g):
        y = F.layer_norm(x, (n,), w, b)
        return torch.autograd.grad(y, (x, w, b), g)

    a = analyze(fwd_bwd, spec(m, n, grad=True), spec(n, grad=True), spec(n, grad=True), spec(m, n))
    (bwd,) = calls(a, "aten.native_layer_norm_backward")
    assert bwd.flops == {"fp32_vector": (8 + 2 + 1) * m * n}


@pytest.mark.parametrize("shape", [(4, 1000), (2, 3, 257)])
def test_softmax(shape):
    numel = 1
    for s in shape:
        numel *= s
    a = analyze(lambda x: torch.softmax(x, dim=-1), spec(*shape))
    assert a.flops == {"fp32_vector": 5 * numel}
    assert a.fused_bytes == a.unfused_bytes == 2 * 2 * numel


def test_swiglu_ffn():
    t, hid, ffn = 24, 64, 176

    def swiglu(x, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)

    a = analyze(swiglu, spec(t, hid), spec(ffn, hid), spec(ffn, hid), spec(hid, ffn))
    assert a.flops == {"bf16_tensor": 3 * 2 * t * hid * ffn, "fp32_vector": (4 + 1) * t * ffn}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def test_rope():
    b, h, s, d = 2, 4, 16, 32
    a = analyze(rope, spec(b, h, s, d), spec(s, d), spec(s, d))
    n = b * h * s * d
    # x*cos, r*sin, add: 1 each per element; the negation touches half the elements; cat moves data
    assert a.flops == {"fp32_vector": 3 * n + n // 2}
    assert a.fused_bytes == 2 * (n + 2 * s * d + n)


@pytest.mark.parametrize("n,v", [(64, 1000), (7, 33)])
def test_cross_entropy(n, v):
    a = analyze(F.cross_entropy, spec(n, v), spec(n, dtype=torch.long))
    # log_softmax 5 per logit, nll gathers and accumulates 1 per row
    assert a.flops == {"fp32_vector": 5 * n * v + n}
    assert a.fused_bytes == 2 * n * v + 8 * n + 2  # bf16 logits, int64 targets, a bf16 scalar loss
    (nll,) = calls(a, "aten.nll_loss_forward")
    assert nll.bytes == 8 * n + 2 * n + 2 + 2  # targets + the n picked log-probs + loss + total weight


def test_embedding_lookup():
    b, s, vocab, d = 2, 9, 1000, 64
    a = analyze(F.embedding, spec(b, s, dtype=torch.long), spec(vocab, d))
    assert a.flops == {}
    assert a.uncounted == []
    assert a.fused_bytes == 8 * b * s + 2 * vocab * d + 2 * b * s * d
    # the gather reads only the selected rows, not the whole table
    assert a.unfused_bytes == 8 * b * s + 2 * (2 * b * s * d)
    assert len(a.notes) == 1 and "input 1" in a.notes[0] and f"{2 * b * s * d} B selected" in a.notes[0]


def test_integer_arithmetic_is_not_flops():
    a = analyze(lambda i, j: i * j + 1, spec(8, 8, dtype=torch.int32), spec(8, 8, dtype=torch.int32))
    assert a.flops == {} and a.uncounted == []


def test_fp64_elementwise_goes_to_the_fp64_vector_unit():
    a = analyze(torch.exp, spec(10, dtype=torch.float64))
    assert a.flops == {"fp64_vector": 10}
    assert vector_unit(torch.float64) == "fp64_vector"


def test_unknown_op_is_uncounted_not_zero():
    a = analyze(lambda x: torch.lgamma(x) + 1, spec(4, 8, dtype=F32))
    assert a.uncounted == ["aten.lgamma"]
    (lg,) = calls(a, "aten.lgamma")
    assert not lg.counted and lg.bytes == 2 * 4 * 8 * 4  # bytes are still known
    assert a.flops == {"fp32_vector": 32}  # the add is counted


def test_views_move_nothing():
    a = analyze(lambda x: x.view(8, 4).t()[:, ::2].unsqueeze(0).expand(3, -1, -1), spec(4, 8))
    assert a.flops == {} and a.unfused_bytes == 0
    assert len(a.calls) == 5 and all(c.bytes == 0 for c in a.calls)
    # ...but reshaping a transposed tensor copies it
    a = analyze(lambda x: x.t().reshape(32), spec(4, 8))
    assert a.unfused_bytes == 2 * 2 * 32


def test_inplace_copy_and_out_count_each_tensor_once():
    def fn(x, y):
        z = torch.empty_like(x)
        z.copy_(x)  # reads x, writes z
        z.add_(y)  # reads z and y, writes z
        return z

    a = analyze(fn, spec(16, dtype=F32), spec(16, dtype=F32))
    by_op = {c.op: c for c in a.calls}
    assert by_op["aten.empty_like"].bytes == 0
    assert by_op["aten.copy_"].bytes == 2 * 64
    assert by_op["aten.add_"].bytes == 3 * 64 and by_op["aten.add_"].flops == {"fp32_vector": 16}


def test_rule_table_is_valid_and_documented():
    table = rule_table()
    for name, rule in table["ops"].items():
        if rule["kind"] in ("elementwise", "reduction"):
            assert isinstance(rule["flops"], int) and rule["flops"] >= 0, name
    assert table["ops"]["add"]["flops"] == 1 and table["ops"]["_softmax"]["flops"] == 5


def test_count_op_on_a_single_record():
    tr = trace(torch.mm, torch.empty(3, 5, device="meta"), torch.empty(5, 7, device="meta"))
    (rec,) = tr.records
    c = count_op(rec, allow_tf32=False)
    assert c.flops == {"fp32_vector": 2 * 3 * 5 * 7} and c.unit == "fp32_vector"
    assert c.bytes == 4 * (15 + 35 + 21)


@pytest.mark.parametrize("case", ["mm", "bmm", "conv", "sdpa"])
def test_agrees_with_torch_flop_counter(case):
    """torch.utils.flop_counter counts the same matrix work (it knows no units)."""
    from torch.utils.flop_counter import FlopCounterMode

    fns = {
        "mm": (torch.mm, [(33, 17), (17, 9)]),
        "bmm": (torch.bmm, [(3, 5, 7), (3, 7, 11)]),
        "conv": (lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 9, 9), (5, 3, 3, 3)]),
        "sdpa": (F.scaled_dot_product_attention, [(2, 3, 16, 8)] * 3),
    }
    fn, shapes = fns[case]
    ins = [torch.empty(s, device="meta", dtype=F32) for s in shapes]
    with FlopCounterMode(display=False) as counter:
        fn(*ins)
    ours = analyze(fn, *ins, allow_tf32=True)
    assert ours.flops["tf32_tensor"] == counter.get_total_flops()


def test_pooling_and_resampling():
    n, c, h = 2, 3, 8
    x = spec(n, c, h, h, dtype=F32)
    assert analyze(lambda a: F.max_pool2d(a, 2), x).flops == {"fp32_vector": n * c * 4 * 4 * 4}
    assert analyze(lambda a: F.avg_pool2d(a, 3, stride=1), x).flops == {"fp32_vector": n * c * 6 * 6 * (9 + 1)}
    up = analyze(lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), x)
    assert up.flops == {"fp32_vector": 7 * n * c * 16 * 16} and up.uncounted == []
    assert analyze(lambda a: F.interpolate(a, scale_factor=2), x).flops == {}  # nearest: a copy


# ---------------------------------------------------------------------------------------------- optimizers


def _trace_meta(fn, *shapes, dtype=F32):
    ts = [torch.empty(s, device="meta", dtype=dtype) for s in shapes]
    tr = trace(fn, ts)
    return {r.name: count_op(r) for r in tr.records}


@pytest.mark.parametrize("dtype", [F32, torch.float16])
@pytest.mark.parametrize("shapes", [[(3, 5), (7,)], [(1, 33), (17, 2)]])
def test_foreach_ops_count_every_tensor_of_the_list(shapes, dtype):
    """Two-tensor lists: the op's per-element FLOPs over both tensors; bytes = the lists read plus written."""
    n = sum(torch.Size(s).numel() for s in shapes)
    item = torch.empty((), dtype=dtype).element_size()

    def fn(ps):
        gs = [torch.empty_like(p) for p in ps]
        hs = [torch.empty_like(p) for p in ps]
        torch._foreach_mul_(ps, 0.9)  # 1 FLOP; ps read and written
        torch._foreach_addcmul_(ps, gs, hs, value=0.5)  # 3 FLOPs; ps, gs, hs read, ps written
        torch._foreach_lerp(gs, hs, 0.1)  # 3 FLOPs, out of place: gs, hs read, a new list written
        torch._foreach_sqrt_(hs)  # 1 FLOP
        torch._foreach_norm(gs)  # 2 FLOPs per element; reads gs, writes one scalar per tensor
        torch._foreach_copy_(ps, gs)  # 0 FLOPs; gs read, ps overwritten (not read)
        return ps

    c = _trace_meta(fn, *shapes, dtype=dtype)
    assert c["_foreach_mul_"].flops == {"fp32_vector": n} and c["_foreach_mul_"].bytes == 2 * n * item
    assert c["_foreach_addcmul_"].flops == {"fp32_vector": 3 * n} and c["_foreach_addcmul_"].bytes == 4 * n * item
    assert c["_foreach_lerp"].flops == {"fp32_vector": 3 * n} and c["_foreach_lerp"].bytes == 3 * n * item
    assert c["_foreach_sqrt_"].flops == {"fp32_vector": n} and c["_foreach_sqrt_"].bytes == 2 * n * item
    assert c["_foreach_norm"].flops == {"fp32_vector": 2 * n} and c["_foreach_norm"].bytes == (n + 2) * item
    assert c["_foreach_copy_"].flops == {} and c["_foreach_copy_"].bytes == 2 * n * item
    assert all(x.counted for x in c.values())


@pytest.mark.parametrize("name", ["_fused_adamw_", "_fused_adam_"])
@pytest.mark.parametrize("amsgrad,weight_decay", [(False, 0.0), (False, 0.01), (True, 0.01)])
def test_fused_adam_by_hand(name, amsgrad, weight_decay):
    """Two parameters: 13 FLOPs per element (+1 decoupled decay for AdamW, +2 L2 decay for Adam, +1 amsgrad);
    bytes: param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq) read, the state written, the steps read."""
    shapes = [(3, 5), (7,)]
    n = 15 + 7

    def fn(ps):
        like = [[torch.empty_like(p) for p in ps] for _ in range(4)]
        steps = [torch.zeros((), device="meta") for _ in ps]
        op = getattr(torch.ops.aten, name)
        op(ps, like[0], like[1], like[2], like[3] if amsgrad else [], steps, lr=1e-3, beta1=0.9, beta2=0.999,
           weight_decay=weight_decay, eps=1e-8, amsgrad=amsgrad, maximize=False)  # fmt: skip
        return ps

    c = _trace_meta(fn, *shapes)[name]
    per = 13 + (({"_fused_adamw_": 1, "_fused_adam_": 2}[name]) if weight_decay else 0) + (1 if amsgrad else 0)
    state = 3 + amsgrad  # param, exp_avg, exp_avg_sq (+ max_exp_avg_sq)
    assert c.flops == {"fp32_vector": per * n}
    assert c.bytes == 4 * n * (state + 1 + state) + 4 * 2  # read: state + grad; written: state; two fp32 steps
