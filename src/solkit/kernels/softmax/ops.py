"""Softmax as custom ops (``solkit::softmax``, ``solkit::softmax_bwd``), the differentiable :func:`softmax` over
them and the :class:`Softmax` module (docs/kernels/custom_ops.md)."""

from __future__ import annotations

import torch

from solkit.kernels.common.ops import KernelOp
from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward


def _softmax_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return softmax_backward(dy, y)


def _softmax_bwd_fake(dy, y):
    return y.new_empty(y.shape)


SOFTMAX_BWD = KernelOp("softmax_bwd", _softmax_bwd, _softmax_bwd_fake)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return softmax_forward(x)


def _softmax_fake(x):
    return x.new_empty(x.shape)


def _softmax_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)  # the backward reads y, not x


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return SOFTMAX_BWD(dy, y)


SOFTMAX = KernelOp("softmax", _softmax, _softmax_fake, backward=_softmax_backward, setup_context=_softmax_setup)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Differentiable softmax along ``dim`` (the op ``solkit::softmax``; the last dimension is native, others are
    moved there, a copy)."""
    if dim in (-1, x.dim() - 1):
        return SOFTMAX(x)
    return SOFTMAX(x.movedim(dim, -1).contiguous()).movedim(-1, dim)


class Softmax(torch.nn.Module):
    """Drop-in ``torch.nn.Softmax(dim)``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
