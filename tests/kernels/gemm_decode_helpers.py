"""Shared by the decode GEMM tests (test_gemm_decode.py, test_gemm_decode_gluon.py): seeded decode-sized
operands and the error check against fp32 (at most 2x torch's own same-dtype error + atol)."""

from __future__ import annotations

import torch

from solkit.kernels.gemm import dispatch as G

ATOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def decode_case(M, N, K, dtype, device, seed=0, bias=False):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(device, dtype)
    w = (torch.randn(N, K, generator=gen) / K**0.5).to(device, dtype)
    r = torch.randn(M, N, generator=gen).to(device, dtype)
    b = torch.randn(N, generator=gen).to(device, dtype) if bias else None
    return x, w, r, b


def check_decode(y, x, w, r, b=None, **kw):
    """Error against fp32 at most 2x torch's own same-dtype error + atol; every element written."""
    ref = G.reference(x, w, b, r, **kw)
    z = torch.nn.functional.linear(x, w, b)
    if kw.get("activation") == "silu":
        z = torch.nn.functional.silu(z)
    mine = z * kw.get("alpha", 1.0) + r * kw.get("beta", 1.0)
    assert torch.isfinite(y).all(), "unwritten (NaN-poisoned) or overflowing output"
    err = (y.float() - ref).abs().max().item()
    budget = 2 * (mine.float() - ref).abs().max().item() + ATOL[x.dtype]
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"
