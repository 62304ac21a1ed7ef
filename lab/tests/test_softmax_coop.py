"""lab.kernels.softmax_coop: the cooperative wide-row softmax (register-held segments, partials traded through a
buffer and a per-row arrival counter), values and gradients against float64.

CPU (Triton interpreter): 2 programs per (CPU: 4) SM, 64-wide segments: 96 to 257-wide rows split into 2 to 8
segments, some of them empty, with phantom rows; the first programs of a group take the fallback (partners not
arrived yet) and the last one the exchange path. GPU: bf16 vocabulary-wide rows, where programs really wait.
"""

from __future__ import annotations

import pytest
import torch
from lab.kernels.softmax_coop import coop_plan, softmax_backward_coop, softmax_forward_coop

ATOL = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}
CASES = {
    "coop": {"segment": 64, "per_sm": 2},
    "coop_lookahead2": {"segment": 64, "per_sm": 2, "lookahead": 2},
    "coop_gpu": {},
    "coop_gpu_4per_sm": {"segment": 4096, "num_warps": 8, "per_sm": 4, "lookahead": 2},
}


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape and out.dtype == torch_out.dtype
    assert torch.isfinite(out).all(), "non-finite output (unwritten element or overflow)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(x, case, device):
    x = x.to(device)
    y = softmax_forward_coop(x, **CASES[case])
    assert y is not None, "not resident"
    xr = x.double().requires_grad_()
    y_ref = torch.softmax(xr, -1)
    _assert_close(y, y_ref, torch.softmax(x, -1), ATOL[x.dtype])
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(y.numel())).to(y)
    dx = softmax_backward_coop(dy, y, **CASES[case])
    (dx_ref,) = torch.autograd.grad(y_ref, xr, dy.double())
    xe = x.clone().requires_grad_()
    (dx_eager,) = torch.autograd.grad(torch.softmax(xe, -1), xe, dy)
    _assert_close(dx, dx_ref, dx_eager, ATOL[x.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 257), (4, 5, 96), (3, 127)])
@pytest.mark.parametrize("case", ["coop", "coop_lookahead2"])
def test_coop_values_and_grads(dtype, shape, case, device):
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=gen) * 4).to(dtype)
    _check(x, case, device)


def test_coop_masked_rows(device):
    x = torch.randn(3, 300, device=device)
    x[0, :250] = -float("inf")
    x[1, 7] = -float("inf")
    y = softmax_forward_coop(x, **CASES["coop"])
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-6, atol=1e-7)


def test_coop_plan_fills_every_sm():
    """128256-wide rows on 132 SMs: 11 segments x 12 groups (all SMs), not 8 x 16 (four idle)."""
    t = torch.empty(0)  # the CPU stand-in reports 4 SMs; 33 per SM makes 132 slots
    grid, segs, seg_len, block_n = coop_plan(4096, 128256, t, 16384, 33)
    assert (grid, segs, block_n) == (132, 11, 16384) and segs * seg_len >= 128256 and seg_len % 16 == 0
    assert coop_plan(2, 128256, t, 16384, 33)[0] == 2 * coop_plan(2, 128256, t, 16384, 33)[1]
    assert coop_plan(4, 10**7, t, 16384, 1) is None  # more segments than resident programs


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["coop_gpu", "coop_gpu_4per_sm"])
@pytest.mark.parametrize("shape", [(300, 128256), (5, 262144), (1000, 20000)])
def test_coop_bf16_gpu(shape, case):
    x = torch.randn(*shape, dtype=torch.bfloat16) * 4
    _check(x, case, "cuda")
