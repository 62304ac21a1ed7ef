"""The portable path forced on a GPU (capability.portable_only, SOLKIT_KERNEL_PATH=portable): every call takes the
pointer kernel and matches the fp32 reference within 2x torch's own error in the same dtype, plus a small atol.
On the H200 this is the path an unknown or unsupported part would take, checked on real hardware."""

from __future__ import annotations

import pytest
import torch

from solkit.kernels.common.capability import portable_only
from solkit.kernels.gemm import dispatch as G

SHAPES = [(1, 4096, 4096), (7, 1000, 264), (64, 512, 4096), (130, 48, 96), (1031, 4096, 1024), (8192, 4096, 4096)]
EPILOGUES = {
    "plain": dict(bias=False, residual=False, alpha=1.0, beta=1.0, activation="none"),
    "bias": dict(bias=True, residual=False, alpha=1.0, beta=1.0, activation="none"),
    "residual": dict(bias=False, residual=True, alpha=1.0, beta=1.0, activation="none"),
    "bias_res_scaled": dict(bias=True, residual=True, alpha=0.5, beta=-2.0, activation="none"),
    "silu": dict(bias=True, residual=True, alpha=1.0, beta=1.0, activation="silu"),
    "gelu_tanh": dict(bias=True, residual=False, alpha=2.0, beta=1.0, activation="gelu_tanh"),
}
ATOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _run(M, N, K, dtype, ep, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to("cuda", dtype)
    w = (torch.randn(N, K, generator=gen) / K**0.5).to("cuda", dtype)
    b = torch.randn(N, generator=gen).to("cuda", dtype) if ep["bias"] else None
    r = torch.randn(M, N, generator=gen).to("cuda", dtype) if ep["residual"] else None
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    y = G.gemm(x, w, b, r, **kw)
    ref = G.reference(x, w, b, r, **kw)
    budget = 2 * (G.native(x, w, b, r, **kw).float() - ref).abs().max().item() + ATOL[dtype]
    assert torch.isfinite(y).all()
    err = (y.float() - ref).abs().max().item()
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("M", "N", "K"), SHAPES)
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_forced_portable_gemm_against_fp32(dtype, M, N, K, epilogue):
    with portable_only():
        _run(M, N, K, dtype, EPILOGUES[epilogue], seed=M + N)
    assert G.LAST_LAUNCH["kernel"] == "pointer"
    assert G.LAST_LAUNCH["family"] == "ampere"


@pytest.mark.gpu
def test_portable_env_forces_pointer(monkeypatch):
    monkeypatch.setenv("SOLKIT_KERNEL_PATH", "portable")
    for M in (1, 2048):
        _run(M, 1024, 512, torch.bfloat16, EPILOGUES["residual"], seed=M)
        assert G.LAST_LAUNCH["kernel"] == "pointer"
    monkeypatch.delenv("SOLKIT_KERNEL_PATH")
    _run(2048, 1024, 512, torch.bfloat16, EPILOGUES["residual"])
    assert G.LAST_LAUNCH["kernel"] != "pointer"  # the default path again (gluon_ws or tma_persistent on the H200)
