"""Inputs and the error check shared by the softmax path tests (rows, re-read): fp64 reference, a budget of twice
eager PyTorch's own error in the same dtype plus a small atol."""

from __future__ import annotations

import torch

ATOL = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}


def softmax_inputs(shape, dtype, device) -> torch.Tensor:
    """``4 randn`` rows with one masked logit (-inf: probability 0) in row 0."""
    x = torch.randn(*shape, dtype=torch.float32) * 4
    x[0, 1] = float("-inf")
    return x.to(device=device, dtype=dtype)


def assert_softmax_close(out: torch.Tensor, x: torch.Tensor) -> None:
    ref = torch.softmax(x.double(), -1)
    assert torch.isfinite(out).all(), "non-finite output (unwritten element?)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch.softmax(x, -1).double() - ref).abs().max().item() + ATOL[x.dtype]
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"
