"""solkit.kernels.norms.rms_norm: RMSNorm (Llama and Gemma casting) and fused add+RMSNorm, values and gradients.

Reference: the same formula in float64. Budget: the kernel's max error is at most 2x the error of
torch's own eager implementation in the input dtype (HF-style code), plus a small atol. On the CPU
the kernels run through Triton's interpreter in fp32/fp16 on small odd shapes; bf16, large shapes
and the >2^31-element case are marked gpu.
"""

from __future__ import annotations

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.norms import AddRMSNorm, RMSNorm, add_rmsnorm, rmsnorm
from solkit.kernels.norms.rms_norm import rmsnorm_backward, rmsnorm_forward

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
SHAPES = [(1, 257), (7, 1031), (2, 3, 96)]


def eager_rmsnorm(x, w, eps=1e-6, offset=0.0, casting="llama"):
    """HF-style eager RMSNorm in x's dtype: Llama rounds xhat before the weight, Gemma at the end."""
    xf = x.float() if x.dtype != torch.float64 else x
    xhat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if casting == "gemma":
        return (xhat * (offset + w.to(xf.dtype))).to(x.dtype)
    return (offset + w) * xhat.to(x.dtype)


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape and out.dtype == torch_out.dtype
    assert torch.isfinite(out).all(), "non-finite output (unwritten element or overflow)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol * max(ref.abs().max().item(), 1.0)
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(x, w, casting, offset, device, residual=None):
    """Forward and gradients of (add+)RMSNorm against float64, with torch's same-dtype error as budget."""
    dtype = x.dtype
    leaves = [t.clone().to(device).requires_grad_() for t in ([x, residual, w] if residual is not None else [x, w])]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    eager_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    if residual is not None:
        s, y = add_rmsnorm(*leaves, 1e-6, offset, casting)
        s_ref = ref_leaves[0] + ref_leaves[1]
        y_ref = eager_rmsnorm(s_ref, ref_leaves[2], 1e-6, offset, casting)
        s_eg = eager_leaves[0] + eager_leaves[1]
        y_eg = eager_rmsnorm(s_eg, eager_leaves[2], 1e-6, offset, casting)
        outs, refs, egs = (s, y), (s_ref, y_ref), (s_eg, y_eg)
    else:
        outs = (rmsnorm(*leaves, 1e-6, offset, casting),)
        refs = (eager_rmsnorm(*ref_leaves, 1e-6, offset, casting),)
        egs = (eager_rmsnorm(*eager_leaves, 1e-6, offset, casting),)
    for out, ref, eg in zip(outs, refs, egs):
        _assert_close(out, ref, eg, ATOL[dtype])
    grads_out = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, leaves, grads_out)
    want = torch.autograd.grad(refs, ref_leaves, [g.double() for g in grads_out])
    eager = torch.autograd.grad(egs, eager_leaves, grads_out)
    for g, r, e in zip(got, want, eager):
        _assert_close(g, r, e, ATOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 1.0)])
def test_rmsnorm_values_and_grads(dtype, shape, casting, offset, device):
    gen = torch.Generator().manual_seed(sum(shape) + len(casting))
    x = (torch.randn(*shape, generator=gen) * 2 + 0.5).to(dtype)
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype)
    _check(x, w, casting, offset, device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 257), (5, 1031)])
def test_add_rmsnorm_values_and_grads(dtype, shape, device):
    gen = torch.Generator().manual_seed(7)
    x, r = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(2))
    w = (torch.randn(shape[-1], generator=gen)).to(dtype)
    _check(x, w, "llama", 0.0, device, residual=r)


def test_add_rmsnorm_sum_only_gradient(device):
    """When only the sum is used downstream, both inputs get its gradient and the norm adds nothing."""
    x, r = (torch.randn(3, 65, device=device, requires_grad=True) for _ in range(2))
    w = torch.randn(65, device=device, requires_grad=True)
    s, _ = add_rmsnorm(x, r, w)
    gs = torch.randn_like(s)
    s.backward(gs)
    torch.testing.assert_close(x.grad, gs)
    torch.testing.assert_close(r.grad, gs)
    assert w.grad is None


@pytest.mark.parametrize("residual", [False, True])
def test_persistent_forward_matches(residual, device):
    """The persistent grid (programs looping over row blocks, next block prefetched) computes the same."""
    x = torch.randn(37, 130, device=device)
    r = torch.randn_like(x) if residual else None
    w = torch.randn(130, device=device)
    ref = rmsnorm_forward(x, w, residual=r)
    for per_sm, block_m in ((1, 1), (2, 4)):
        got = rmsnorm_forward(x, w, residual=r, programs_per_sm=per_sm, block_m=block_m)
        for a, b in zip(got, ref):
            if a is not None:
                torch.testing.assert_close(a, b)


def test_rstd_saved_only_for_training(device):
    x = torch.randn(4, 100, device=device)
    w = torch.ones(100, device=device)
    y, s, rstd = rmsnorm_forward(x, w, save_rstd=False)
    assert s is None and rstd is None
    _, _, rstd = rmsnorm_forward(x, w)
    torch.testing.assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1) + 1e-6))


def test_backward_partial_blocks(device):
    """More rows than programs, and row blocks of several rows: every row contributes to dW exactly once."""
    x = torch.randn(29, 40, device=device)
    w = torch.randn(40, device=device)
    _, _, rstd = rmsnorm_forward(x, w)
    dy = torch.randn_like(x)
    for block_m, prefetch in ((1, True), (4, False), (8, True), (2, 2), (1, 2)):
        dx, dw = rmsnorm_backward(dy, x, w, rstd, block_m=block_m, programs_per_sm=1, prefetch=prefetch)
        torch.testing.assert_close(dw, (dy * x * rstd[:, None]).sum(0), rtol=1e-5, atol=1e-5)
        dx_ref, _ = rmsnorm_backward(dy, x, w, rstd, block_m=2, programs_per_sm=3)
        torch.testing.assert_close(dx, dx_ref, rtol=1e-5, atol=1e-5)
        # The sum's own gradient (add+RMSNorm) is added to dx, prefetched with the row block or not.
        ds = torch.randn_like(x)
        dx_s, _ = rmsnorm_backward(dy, x, w, rstd, ds=ds, block_m=block_m, programs_per_sm=1, prefetch=prefetch)
        torch.testing.assert_close(dx_s, dx_ref + ds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "opts",
    [
        dict(fused_reduce=True, block_m=32),  # one program (on the CPU too): the in-kernel reduction tail
        dict(balanced=True),
        dict(w_reload=True, prefetch=2),
        dict(w_reload=True, prefetch=0, block_m=2, fused_reduce=True, balanced=True),
        dict(block_m=2, num_warps=4, programs_per_sm=1, prefetch=2),
        dict(two_pass=True),
        dict(two_pass=True, w_reload=True, block_m=2),
        dict(two_pass=True, fused_reduce=True, block_m=32),
    ],
)
def test_backward_launch_options(opts, device):
    """The backward's launch options (fused dW reduction, balanced grid, weight re-read per row block, deeper
    ring) give the default's dx and dW (and the sum's gradient on top with ds)."""
    x = torch.randn(29, 131, device=device)
    w = torch.rand(131, device=device) + 0.5
    _, _, rstd = rmsnorm_forward(x, w)
    dy, ds = torch.randn_like(x), torch.randn_like(x)
    dx_ref, dw_ref = rmsnorm_backward(dy, x, w, rstd, fused_reduce=False, balanced=False, w_reload=False)
    dx, dw = rmsnorm_backward(dy, x, w, rstd, **opts)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dw, dw_ref, rtol=1e-5, atol=1e-5)
    dx_s, dw_s = rmsnorm_backward(dy, x, w, rstd, ds=ds, **opts)
    torch.testing.assert_close(dx_s, dx_ref + ds, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dw_s, dw_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_cols", [256, 512])
@pytest.mark.parametrize("opts", [dict(tma_stages=3), dict(tma_stages=2, balanced=False, fused_reduce=False)])
def test_backward_tma(n_cols, opts, device):
    """The TMA backward (rows as [R, 256] boxes, pipelined through shared memory) against the pointer kernel,
    with and without the sum's gradient; rows it cannot take (width not a power of two, misaligned) fall back."""
    x = torch.randn(9, n_cols, device=device)
    w = torch.rand(n_cols, device=device) + 0.5
    _, _, rstd = rmsnorm_forward(x, w)
    dy, ds = torch.randn_like(x), torch.randn_like(x)
    for dsum in (None, ds):
        ref = rmsnorm_backward(dy, x, w, rstd, ds=dsum, tma_stages=0)
        got = rmsnorm_backward(dy, x, w, rstd, ds=dsum, **opts)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    from solkit.kernels.norms.backward import tma_shape

    assert tma_shape(x, [x, dy]) == (n_cols // 256, 256)
    assert tma_shape(x[:, :200], [x[:, :200]]) is None and tma_shape(x[:, 1:], [x[:, 1:]]) is None


def test_balanced_grid_and_reduce_tile():
    from solkit.kernels.norms.backward import balanced_programs, reduce_tile

    assert balanced_programs(8192, 264) == 256  # 32 row blocks each, no program left alone for a 32nd
    assert balanced_programs(8192, 132) == 131 and balanced_programs(7, 8) == 7 and balanced_programs(1, 264) == 1
    for n_blocks, slots in ((8192, 264), (1000, 264), (5, 3)):
        p = balanced_programs(n_blocks, slots)
        assert p <= slots and -(-n_blocks // p) == -(-n_blocks // min(slots, n_blocks))
    for n_cols, programs in ((4096, 264), (8192, 132), (131, 1), (16384, 528)):
        block_p, block_c = reduce_tile(n_cols, programs)
        assert block_p >= programs and block_p * block_c <= max(4096, block_p * 4)


def test_modules(device):
    norm = RMSNorm(48, eps=1e-5, device=device)
    gemma = RMSNorm(48, offset=1.0, casting="gemma", device=device)
    assert torch.equal(gemma.weight, torch.zeros(48, device=device))
    x = torch.randn(2, 5, 48, device=device)
    torch.testing.assert_close(norm(x), eager_rmsnorm(x, norm.weight, 1e-5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gemma(x), norm(x), rtol=1e-5, atol=1e-5)  # zeros + offset 1 == ones
    s, y = AddRMSNorm(48, device=device)(x, x)
    torch.testing.assert_close(s, 2 * x)


def test_bad_inputs(device):
    x = torch.randn(4, 16, device=device)
    with pytest.raises(SolkitError, match="weight"):
        rmsnorm(x, torch.ones(15, device=device))
    with pytest.raises(SolkitError, match="casting"):
        rmsnorm(x, torch.ones(16, device=device), casting="qwen")
    with pytest.raises(SolkitError, match="dtype"):
        rmsnorm(x.to(torch.int32), torch.ones(16, device=device))
    with pytest.raises(SolkitError, match="residual"):
        add_rmsnorm(x, torch.randn(4, 17, device=device), torch.ones(16, device=device))
    with pytest.raises(SolkitError, match="hints"):
        rmsnorm_forward(x, torch.ones(16, device=device), chunk=16, hints=3)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 1.0)])
def test_looped_forward(residual, casting, offset, device):
    """The two-pass looped forward (``chunk``): several chunks with a partial last one, the residual's sum
    stored in pass 1 and re-read in pass 2; same values as the one-block forward."""
    x, w = torch.randn(5, 131, device=device), torch.rand(131, device=device) + 0.5
    r = torch.randn(5, 131, device=device) if residual else None
    want = rmsnorm_forward(x, w, residual=r, offset=offset, casting=casting)
    # (chunk, prefetch, cache hints, pipeline stages); 256 = the whole row in one chunk per pass
    for chunk, prefetch, hints, stages in ((32, False, 1, None), (32, True, 1, None), (32, False, 0, 1),
                                           (256, False, 2, 1), (64, True, 2, 2)):  # fmt: skip
        got = rmsnorm_forward(x, w, residual=r, offset=offset, casting=casting, chunk=chunk, num_warps=1,
                              looped_prefetch=prefetch, hints=hints, num_stages=stages)  # fmt: skip
        for g, e in zip(got, want):
            if e is not None:
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("chunk", [0, 64])
def test_width_overrides(residual, chunk, device, monkeypatch):
    """``by_width`` entries replace the launch settings for rows at least that wide (here: one 2-warp
    program per SM, prefetch 2; a 1-row forward of 2 warps, or the looped forward) and keep the results."""
    from solkit.kernels.norms import rms_norm as mod

    fwd = {"min_tile": 1, "bytes_per_thread": 64, "num_warps": 2, "chunk": chunk}
    wide = {"bwd_num_warps": 2, "bwd_num_warps_ds": 1, "bwd_programs_per_sm": 1, "bwd_prefetch": 2,
            "fwd": fwd, "fwd_residual": fwd}  # fmt: skip
    monkeypatch.setitem(mod.RMSNORM_CONFIG, "by_width", {128: wide})
    x = torch.randn(37, 131)
    _check(x, torch.rand(131) + 0.5, "llama", 0.0, device, residual=torch.randn(37, 131) if residual else None)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 5120), (3, 8192), (2048, 8192)])
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 1.0)])
def test_rmsnorm_bf16_gpu(shape, casting, offset):
    x = torch.randn(*shape, dtype=torch.bfloat16)
    w = (torch.rand(shape[-1]) + 0.5).to(torch.bfloat16)
    _check(x, w, casting, offset, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [4096, 8192])
def test_add_rmsnorm_bf16_gpu(n_cols):
    x, r = (torch.randn(2048, n_cols, dtype=torch.bfloat16) for _ in range(2))
    _check(x, torch.randn(n_cols, dtype=torch.bfloat16), "llama", 0.0, "cuda", residual=r)


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [4096, 8192])
@pytest.mark.parametrize("ds", [False, True])
def test_backward_fused_reduce_gpu(n_cols, ds):
    """The in-kernel dW reduction across a full persistent grid (the grid barrier met by every program), twice
    in a row and inside a CUDA graph (the barrier counter grows by the grid size per launch), against the
    two-kernel reduction; bf16 at Llama widths, several launch shapes."""
    x = torch.randn(4099, n_cols, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(torch.bfloat16)
    _, _, rstd = rmsnorm_forward(x, w)
    dy = torch.randn_like(x)
    dsum = torch.randn_like(x) if ds else None
    dx_ref, dw_ref = rmsnorm_backward(dy, x, w, rstd, ds=dsum, fused_reduce=False)
    deep = dict(block_m=2, num_warps=32, programs_per_sm=1, prefetch=2)
    for opts in ({}, dict(balanced=True), deep, dict(two_pass=True, balanced=True), dict(tma_stages=4)):
        for _ in range(2):
            dx, dw = rmsnorm_backward(dy, x, w, rstd, ds=dsum, fused_reduce=True, **opts)
            torch.testing.assert_close(dx.float(), dx_ref.float(), rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(dw.float(), dw_ref.float(), rtol=1e-2, atol=1e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dx_g, dw_g = rmsnorm_backward(dy, x, w, rstd, ds=dsum, fused_reduce=True)
    for _ in range(3):
        dw_g.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(dw_g.float(), dw_ref.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_rmsnorm_beyond_int32_elements_gpu():
    """More than 2^31 elements: rows past the int32 offset limit are normalised and differentiated correctly."""
    n_cols = 4096
    n_rows = 2**31 // n_cols + 64
    if torch.cuda.mem_get_info()[0] < 6 * n_rows * n_cols * 2:
        pytest.skip("not enough free GPU memory for a >2^31-element RMSNorm")
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(torch.bfloat16)
    y, _, rstd = rmsnorm_forward(x, w)
    tail = slice(n_rows - 80, n_rows)
    _assert_close(y[tail], eager_rmsnorm(x[tail].double(), w.double()), eager_rmsnorm(x[tail], w), ATOL[torch.bfloat16])
    dy = torch.randn_like(x)
    dx, dw = rmsnorm_backward(dy, x, w, rstd)
    del y
    xt = x[tail].double().requires_grad_()
    (gx,) = torch.autograd.grad(eager_rmsnorm(xt, w.double()), xt, dy[tail].double())
    torch.testing.assert_close(dx[tail].double(), gx, rtol=2e-2, atol=2e-2)
    assert torch.isfinite(dw).all()
