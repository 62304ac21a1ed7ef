"""solkit.kernels.cross_entropy.fused_linear: chunked linear + cross-entropy, loss and dHidden/dW/dBias.

Reference: ``hidden @ W^T + b`` then the float64 cross-entropy of tests/kernels/test_cross_entropy.py's
formula (softcap, label smoothing, z-loss, ignore_index). Chunks smaller than, and not dividing, the
token count. bf16 and memory checks are marked gpu.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.cross_entropy import FusedLinearCrossEntropyLoss, fused_linear_cross_entropy
from solkit.kernels.cross_entropy.fused_linear import fused_linear_ce_flops

CE_SMALL = {"block": 512}


def ref_loss(h, w, b, y, ignore_index=-100, label_smoothing=0.0, z_loss_scale=0.0, softcap=None, reduction="mean"):
    z = h @ w.t() + (b if b is not None else 0)
    z = softcap * torch.tanh(z / softcap) if softcap else z
    per_row = F.cross_entropy(z, y, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="none")
    valid = y != ignore_index
    lse = torch.logsumexp(z, -1)
    per_row = per_row + torch.where(valid, z_loss_scale * lse * lse, 0.0)
    return per_row.sum() / (valid.sum() if reduction == "mean" else 1)


@pytest.mark.parametrize(
    "tokens,chunk,opts,with_bias",
    [
        (1, 4, {}, False),
        (13, 4, {"label_smoothing": 0.1, "z_loss_scale": 1e-3}, True),
        (16, 16, {"softcap": 5.0, "reduction": "sum"}, False),
        (17, 5, {"softcap": 5.0, "label_smoothing": 0.05}, True),
    ],
    ids=["one-token", "smooth-zloss-bias", "softcap-sum-one-chunk", "odd-chunks-bias"],
)
def test_values_and_grads_fp32(tokens, chunk, opts, with_bias, device):
    torch.manual_seed(tokens * 7 + chunk)
    hdim, vocab = 24, 301
    h = torch.randn(tokens, hdim, device=device)
    w = torch.randn(vocab, hdim, device=device) * hdim**-0.5
    b = torch.randn(vocab, device=device) if with_bias else None
    y = torch.randint(0, vocab, (tokens,), device=device)
    if tokens > 3:
        y[2] = -100
    leaves = [h, w] + ([b] if with_bias else [])
    xs = [t.clone().requires_grad_() for t in leaves]
    loss = fused_linear_cross_entropy(xs[0], xs[1], y, xs[2] if with_bias else None, chunk_tokens=chunk,
                                      ce_config=CE_SMALL, **opts)  # fmt: skip
    grads = torch.autograd.grad(loss * 1.5, xs)
    x64 = [t.double().requires_grad_() for t in leaves]
    ref = ref_loss(x64[0], x64[1], x64[2] if with_bias else None, y, **opts)
    rgrads = torch.autograd.grad(ref * 1.5, x64)
    torch.testing.assert_close(loss.double(), ref, atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, rgrads):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), r, atol=1e-5, rtol=1e-4)


def test_fp16_and_module(device):
    torch.manual_seed(3)
    h = torch.randn(2, 5, 32, device=device).half()
    w = (torch.randn(509, 32, device=device) * 32**-0.5).half()
    y = torch.randint(0, 509, (2, 5), device=device)
    mod = FusedLinearCrossEntropyLoss(chunk_tokens=3, return_z_loss=True, z_loss_scale=1e-3)
    hs, ws = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss, z = mod(hs, ws, y)
    gh, gw = torch.autograd.grad(loss, (hs, ws))
    assert gh.shape == h.shape and gw.shape == w.shape and gh.dtype == torch.float16
    h64, w64 = h.double().reshape(-1, 32).requires_grad_(), w.double().requires_grad_()
    ref = ref_loss(h64, w64, None, y.reshape(-1), z_loss_scale=1e-3)
    rh, rw = torch.autograd.grad(ref, (h64, w64))
    torch.testing.assert_close(loss.double(), ref, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(gh.double().reshape(-1, 32), rh, atol=2e-3, rtol=2e-2)
    torch.testing.assert_close(gw.double(), rw, atol=2e-3, rtol=2e-2)
    lse = torch.logsumexp(h64.detach() @ w64.detach().t(), -1)
    torch.testing.assert_close(z.double(), 1e-3 * (lse * lse).mean(), atol=1e-4, rtol=1e-3)


def test_weight_only_grad(device):
    h = torch.randn(6, 8, device=device)
    w = torch.randn(40, 8, device=device, requires_grad=True)
    y = torch.randint(0, 40, (6,), device=device)
    (gw,) = torch.autograd.grad(fused_linear_cross_entropy(h, w, y, chunk_tokens=4), w)
    w64 = w.detach().double().requires_grad_()
    (rw,) = torch.autograd.grad(F.cross_entropy(h.double() @ w64.t(), y), w64)
    torch.testing.assert_close(gw.double(), rw, atol=1e-6, rtol=1e-5)


def test_bad_inputs_raise(device):
    h, w, y = torch.randn(4, 8, device=device), torch.randn(10, 8, device=device), torch.zeros(4, dtype=torch.long)
    with pytest.raises(SolkitError, match="reduction"):
        fused_linear_cross_entropy(h, w, y, reduction="none")
    with pytest.raises(SolkitError, match="weight"):
        fused_linear_cross_entropy(h, w.t(), y)
    with pytest.raises(SolkitError, match="chunk_tokens"):
        fused_linear_cross_entropy(h, w, y, chunk_tokens=0)
    with pytest.raises(SolkitError, match="bias"):
        fused_linear_cross_entropy(h, w, y, torch.randn(3, device=device))
    assert fused_linear_ce_flops(16384, 4096, 128256) == 6 * 16384 * 4096 * 128256


@pytest.mark.gpu
def test_gpu_bf16_matches_eager_and_saves_memory():
    torch.manual_seed(0)
    t, hdim, vocab = 4096, 1024, 32000
    h = torch.randn(t, hdim, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(vocab, hdim, device="cuda") * hdim**-0.5).to(torch.bfloat16)
    y = torch.randint(0, vocab, (t,), device="cuda")
    y[::9] = -100

    def peak(fn):
        hs, ws = h.clone().requires_grad_(), w.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        loss = fn(hs, ws)
        grads = torch.autograd.grad(loss, (hs, ws))
        torch.cuda.synchronize()
        return loss.detach(), grads, torch.cuda.max_memory_allocated() - base

    loss, (gh, gw), mem = peak(lambda a, b: fused_linear_cross_entropy(a, b, y, chunk_tokens=1024))
    eloss, (eh, ew), emem = peak(lambda a, b: F.cross_entropy(a @ b.t(), y))
    h32, w32 = h.float().requires_grad_(), w.float().requires_grad_()
    ref = F.cross_entropy(h32 @ w32.t(), y)
    rh, rw = torch.autograd.grad(ref, (h32, w32))
    for got, eag, r in ((loss, eloss, ref), (gh, eh, rh), (gw, ew, rw)):
        err = (got.float() - r).norm() / r.norm()
        eerr = (eag.float() - r).norm() / r.norm()
        assert err <= 2 * eerr + 1e-3, f"{err:.3e} vs eager {eerr:.3e}"
    assert mem < emem / 2, f"fused peak {mem / 2**20:.0f} MiB vs eager {emem / 2**20:.0f} MiB"
