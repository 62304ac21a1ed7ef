"""RoPE as custom ops (``solkit::rope``, ``solkit::rope_bwd``: q and k rotated in one launch), the
differentiable :func:`apply_rope` over them, and the :class:`RoPE` module (docs/kernels/custom_ops.md)."""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.ops import KernelOp
from solkit.kernels.rope.rotary import LAYOUTS, rope_backward, rope_forward


def _rope_bwd(
    dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: torch.Tensor | None,
    interleaved: bool, layout: str,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return rope_backward(dq, dk, cos, sin, position_ids, interleaved=interleaved, layout=layout)


def _rope_bwd_fake(dq, dk, cos, sin, position_ids, interleaved, layout):
    return torch.empty_like(dq), torch.empty_like(dk)


ROPE_BWD = KernelOp("rope_bwd", _rope_bwd, _rope_bwd_fake)


def _rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: torch.Tensor | None,
    interleaved: bool, layout: str,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return rope_forward(q, k, cos, sin, position_ids, interleaved=interleaved, layout=layout)


def _rope_fake(q, k, cos, sin, position_ids, interleaved, layout):
    return torch.empty_like(q), torch.empty_like(k)


def _rope_setup(ctx, inputs, output) -> None:
    _q, _k, cos, sin, position_ids, interleaved, layout = inputs
    ctx.save_for_backward(cos, sin, *(() if position_ids is None else (position_ids,)))
    ctx.has_pos, ctx.interleaved, ctx.layout = position_ids is not None, interleaved, layout


def _rope_backward(ctx, dq, dk):
    saved = ctx.saved_tensors
    pos = saved[2] if ctx.has_pos else None
    dq_in, dk_in = ROPE_BWD(dq, dk, saved[0], saved[1], pos, ctx.interleaved, ctx.layout)
    return dq_in, dk_in, None, None, None, None, None


ROPE = KernelOp("rope", _rope, _rope_fake, backward=_rope_backward, setup_context=_rope_setup)


def apply_rope(q, k, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd"):
    """RoPE on q and k with autograd support (the op ``solkit::rope``; layouts: the rotary module's docstring);
    cos/sin/position_ids get no gradient."""
    return ROPE(q, k, cos, sin, position_ids, bool(interleaved), layout)


class RoPE(torch.nn.Module):
    """nn.Module form of :func:`apply_rope`; the layout choices are fixed at construction."""

    def __init__(self, interleaved: bool = False, layout: str = "bshd") -> None:
        super().__init__()
        if layout not in LAYOUTS:
            raise SolkitError(f"rope: layout must be one of {LAYOUTS}, got {layout!r}")
        self.interleaved, self.layout = interleaved, layout

    def forward(self, q, k, cos, sin, position_ids=None):
        return apply_rope(q, k, cos, sin, position_ids, interleaved=self.interleaved, layout=self.layout)

    def extra_repr(self) -> str:
        return f"interleaved={self.interleaved}, layout={self.layout!r}"
