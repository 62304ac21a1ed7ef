"""solkit.kernels.norms.layer_norm: values and gradients (dx, dw, db) against a float64 reference.

Budget: the kernel's max error is at most 2x torch's own ``F.layer_norm`` error in the input dtype,
plus a small atol. CPU runs use Triton's interpreter in fp32/fp16 on small odd shapes; bf16, large
shapes and the >2^31-element case are marked gpu.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.norms import LayerNorm, layernorm
from solkit.kernels.norms.layer_norm import layernorm_backward, layernorm_forward

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape and out.dtype == torch_out.dtype
    assert torch.isfinite(out).all(), "non-finite output (unwritten element or overflow)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol * max(ref.abs().max().item(), 1.0)
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(x, w, b, device, eps=1e-5):
    dtype = x.dtype
    tensors = [x, w] + ([b] if b is not None else [])
    leaves = [t.to(device).requires_grad_() for t in tensors]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    eager_leaves = [t.detach().clone().requires_grad_() for t in leaves]

    def torch_ln(ls):
        return F.layer_norm(ls[0], (ls[0].shape[-1],), ls[1], ls[2] if len(ls) > 2 else None, eps)

    out = layernorm(*leaves, eps=eps) if b is not None else layernorm(leaves[0], leaves[1], None, eps)
    ref, eager = torch_ln(ref_leaves), torch_ln(eager_leaves)
    _assert_close(out, ref, eager, ATOL[dtype])
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, dy)
    want = torch.autograd.grad(ref, ref_leaves, dy.double())
    eager_g = torch.autograd.grad(eager, eager_leaves, dy)
    for g, r, e in zip(got, want, eager_g):
        _assert_close(g, r, e, ATOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 257), (7, 1031), (2, 3, 96)])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_values_and_grads(dtype, shape, bias, device):
    gen = torch.Generator().manual_seed(sum(shape) + bias)
    x = (torch.randn(*shape, generator=gen) * 3 + 1.0).to(dtype)  # a non-zero mean exercises centring
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype)
    b = torch.randn(shape[-1], generator=gen).to(dtype) if bias else None
    _check(x, w, b, device)


def test_stats_and_partial_blocks(device):
    x = torch.randn(29, 40, device=device) + 2
    w, b = torch.randn(40, device=device), torch.randn(40, device=device)
    y, mean, rstd = layernorm_forward(x, w, b)
    torch.testing.assert_close(mean, x.mean(-1))
    torch.testing.assert_close(rstd, torch.rsqrt(x.var(-1, unbiased=False) + 1e-5))
    assert layernorm_forward(x, w, b, save_stats=False)[1] is None
    dy = torch.randn_like(x)
    xhat = (x - mean[:, None]) * rstd[:, None]
    for block_m, prefetch in ((1, True), (4, False), (16, True), (2, 2), (1, 2)):
        _, dw, db = layernorm_backward(dy, x, w, mean, rstd, block_m=block_m, programs_per_sm=1, prefetch=prefetch)
        torch.testing.assert_close(dw, (dy * xhat).sum(0), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(db, dy.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "opts",
    [
        dict(fused_reduce=True, block_m=32),  # one program (on the CPU too): the in-kernel reduction tail
        dict(balanced=True),
        dict(w_reload=True, prefetch=2),
        dict(w_reload=True, prefetch=0, block_m=2, fused_reduce=True, balanced=True),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_backward_launch_options(opts, bias, device):
    """Fused dW/dB reduction, balanced grid, weight re-read per block: the default's dx, dw and db."""
    x = torch.randn(29, 131, device=device) + 1
    w, b = torch.rand(131, device=device) + 0.5, torch.randn(131, device=device)
    _, mean, rstd = layernorm_forward(x, w, b)
    dy = torch.randn_like(x)
    ref = layernorm_backward(dy, x, w, mean, rstd, has_bias=bias, fused_reduce=False, balanced=False, w_reload=False)
    got = layernorm_backward(dy, x, w, mean, rstd, has_bias=bias, **opts)
    assert (got[2] is None) == (not bias)
    for g, r in zip(got, ref):
        if r is not None:
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_cols", [256, 512])
@pytest.mark.parametrize("bias", [True, False])
def test_backward_tma(n_cols, bias, device):
    """The TMA backward (rows as [R, 256] boxes pipelined through shared memory) against the pointer kernel."""
    x = torch.randn(9, n_cols, device=device) + 1
    w, b = torch.rand(n_cols, device=device) + 0.5, torch.randn(n_cols, device=device)
    _, mean, rstd = layernorm_forward(x, w, b)
    dy = torch.randn_like(x)
    ref = layernorm_backward(dy, x, w, mean, rstd, has_bias=bias, tma_stages=0)
    for opts in (dict(tma_stages=3), dict(tma_stages=2, balanced=False, fused_reduce=False)):
        got = layernorm_backward(dy, x, w, mean, rstd, has_bias=bias, **opts)
        for g, r in zip(got, ref):
            if r is not None:
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("one_pass", [True, False])
@pytest.mark.parametrize("shape", [(1, 257), (5, 131)])
def test_forward_variants_large_mean(dtype, one_pass, shape, device):
    """Both statistics paths, on rows whose mean is 30x their spread (where an unshifted E[x^2] - E[x]^2
    would cancel); mean and rstd checked against float64, the output against torch's own error."""
    gen = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(*shape, generator=gen) + 30.0).to(dtype).to(device)
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype).to(device)
    b = torch.randn(shape[-1], generator=gen).to(dtype).to(device)
    y, mean, rstd = layernorm_forward(x, w, b, one_pass=one_pass)
    xd = x.double()
    torch.testing.assert_close(mean.double(), xd.mean(-1), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5), rtol=1e-4, atol=0)
    ref = F.layer_norm(xd, (shape[-1],), w.double(), b.double())
    _assert_close(y, ref, F.layer_norm(x, (shape[-1],), w, b), ATOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_looped_forward_large_mean(dtype, bias, device):
    """The two-pass looped forward (``chunk``): several chunks with a partial last one, rows whose mean is
    30x their spread; mean and rstd against float64, the output against torch's own error, and the same
    values as the one-block kernel."""
    gen = torch.Generator().manual_seed(11 + bias)
    x = (torch.randn(5, 131, generator=gen) + 30.0).to(dtype).to(device)
    w = (torch.rand(131, generator=gen) + 0.5).to(dtype).to(device)
    b = torch.randn(131, generator=gen).to(dtype).to(device) if bias else None
    y, mean, rstd = layernorm_forward(x, w, b, chunk=32, num_warps=1)
    y_one, mean_one, rstd_one = layernorm_forward(x, w, b, chunk=256, num_warps=2)  # the row in one piece
    torch.testing.assert_close(y_one, y, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close((mean_one, rstd_one), (mean, rstd))
    xd = x.double()
    torch.testing.assert_close(mean.double(), xd.mean(-1), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5), rtol=1e-4, atol=0)
    bd = b.double() if bias else None
    _assert_close(y, F.layer_norm(xd, (131,), w.double(), bd), F.layer_norm(x, (131,), w, b), ATOL[dtype])
    y1 = layernorm_forward(x, w, b, chunk=0, one_pass=True)[0]
    torch.testing.assert_close(y, y1, rtol=1e-3, atol=1e-3)
    assert layernorm_forward(x, w, b, chunk=64, save_stats=False)[1] is None


def test_module_matches_torch(device):
    ours = LayerNorm(72, device=device)
    ref = torch.nn.LayerNorm(72, device=device)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.normal_()
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    x = torch.randn(3, 4, 72, device=device)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    assert LayerNorm(8, bias=False).bias is None


def test_bad_inputs(device):
    x = torch.randn(4, 16, device=device)
    with pytest.raises(SolkitError, match="bias"):
        layernorm(x, torch.ones(16, device=device), torch.ones(3, device=device))
    with pytest.raises(SolkitError, match="maximum"):
        layernorm(torch.randn(1, 70000, device=device), torch.ones(70000, device=device))
    with pytest.raises(SolkitError, match="hidden_size"):
        LayerNorm(0)


def test_width_overrides(device, monkeypatch):
    """``by_width`` entries replace the launch settings for rows at least that wide (one 2-warp backward
    program per SM, prefetch 2; a 2-warp forward, then the looped forward) and keep the results."""
    from solkit.kernels.norms import layer_norm as mod

    wide = {"bwd_num_warps": 2, "bwd_programs_per_sm": 1, "bwd_prefetch": 2, "fwd_num_warps": 2}
    monkeypatch.setitem(mod.LAYERNORM_CONFIG, "by_width", {128: wide})
    x = torch.randn(37, 131) + 1
    _check(x, torch.rand(131) + 0.5, torch.randn(131), device)
    # the looped forward from the per-width entry, through autograd (its saved statistics feed the backward)
    monkeypatch.setitem(mod.LAYERNORM_CONFIG, "by_width", {128: {**wide, "fwd_chunk": 64, "fwd_looped_num_warps": 1}})
    _check(x, torch.rand(131) + 0.5, torch.randn(131), device)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 5120), (3, 8192), (2048, 8192)])
def test_layernorm_bf16_gpu(shape):
    x = torch.randn(*shape, dtype=torch.bfloat16) + 1
    _check(x, (torch.rand(shape[-1]) + 0.5).to(torch.bfloat16), torch.randn(shape[-1]).to(torch.bfloat16), "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [4096, 8192])
def test_backward_fused_reduce_gpu(n_cols):
    """The in-kernel dW/dB reduction across a full persistent grid, repeated and in a CUDA graph, against the
    two-kernel reduction (bf16, Llama widths)."""
    x = torch.randn(4099, n_cols, device="cuda", dtype=torch.bfloat16) + 1
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(torch.bfloat16)
    b = torch.randn(n_cols, device="cuda").to(torch.bfloat16)
    _, mean, rstd = layernorm_forward(x, w, b)
    dy = torch.randn_like(x)
    ref = layernorm_backward(dy, x, w, mean, rstd, fused_reduce=False)
    deep = dict(num_warps=32, programs_per_sm=1, prefetch=2, w_reload=True)
    for opts in ({}, dict(balanced=True), deep, dict(tma_stages=4), dict(tma_stages=3, num_warps=16)):
        for _ in range(2):
            got = layernorm_backward(dy, x, w, mean, rstd, fused_reduce=True, **opts)
            torch.testing.assert_close(got[0].float(), ref[0].float(), rtol=2e-2, atol=2e-2)
            for g, r in zip(got[1:], ref[1:]):
                torch.testing.assert_close(g.float(), r.float(), rtol=1e-2, atol=1e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = layernorm_backward(dy, x, w, mean, rstd, fused_reduce=True)
    for _ in range(3):
        got[1].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(got[1].float(), ref[1].float(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_layernorm_beyond_int32_elements_gpu():
    n_cols = 4096
    n_rows = 2**31 // n_cols + 64
    if torch.cuda.mem_get_info()[0] < 6 * n_rows * n_cols * 2:
        pytest.skip("not enough free GPU memory for a >2^31-element LayerNorm")
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(torch.bfloat16)
    b = torch.randn(n_cols, device="cuda").to(torch.bfloat16)
    y, mean, rstd = layernorm_forward(x, w, b)
    tail = slice(n_rows - 80, n_rows)
    ref = F.layer_norm(x[tail].double(), (n_cols,), w.double(), b.double())
    _assert_close(y[tail], ref, F.layer_norm(x[tail], (n_cols,), w, b), ATOL[torch.bfloat16])
    del y
    dy = torch.randn_like(x)
    dx, dw, db = layernorm_backward(dy, x, w, mean, rstd)
    xt = x[tail].double().requires_grad_()
    (gx,) = torch.autograd.grad(F.layer_norm(xt, (n_cols,), w.double(), b.double()), xt, dy[tail].double())
    torch.testing.assert_close(dx[tail].double(), gx, rtol=2e-2, atol=2e-2)
    assert torch.isfinite(dw).all() and torch.isfinite(db).all()
