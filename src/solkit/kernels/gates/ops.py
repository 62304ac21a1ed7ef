"""The gated activations as custom ops (``solkit::glu``, ``solkit::glu_bwd``; the activation is an argument),
the differentiable :func:`swiglu` / :func:`geglu` over them, and their modules (docs/kernels/custom_ops.md)."""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.ops import KernelOp
from solkit.kernels.gates.glu import gated_backward, gated_forward


def _glu_bwd(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return gated_backward(grad_out, gate, up, activation)


def _glu_bwd_fake(grad_out, gate, up, activation):
    return gate.new_empty(gate.shape), up.new_empty(up.shape, dtype=gate.dtype)


GLU_BWD = KernelOp("glu_bwd", _glu_bwd, _glu_bwd_fake)


def _glu(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    return gated_forward(gate, up, activation)


def _glu_fake(gate, up, activation):
    return gate.new_empty(gate.shape)


def _glu_setup(ctx, inputs, output) -> None:
    gate, up, activation = inputs
    ctx.save_for_backward(gate, up)  # the activation is recomputed in the backward
    ctx.activation = activation


def _glu_backward(ctx, grad_out):
    gate, up = ctx.saved_tensors
    dgate, dup = GLU_BWD(grad_out, gate, up, ctx.activation)
    return dgate, dup, None


GLU = KernelOp("glu", _glu, _glu_fake, backward=_glu_backward, setup_context=_glu_setup)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` with autograd support (the op ``solkit::glu``)."""
    return GLU(gate, up, "silu")


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(gate) * up`` with autograd support (the op ``solkit::glu``)."""
    return GLU(gate, up, "gelu_tanh")


class _GatedModule(torch.nn.Module):
    activation = "silu"

    def forward(self, gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
        """``act(gate) * up``; with ``up=None``, ``gate`` is a fused ``[..., 2N]`` tensor split into halves."""
        if up is None:
            if gate.shape[-1] % 2:
                raise SolkitError(f"swiglu: fused gate/up input needs an even last dim, got {gate.shape[-1]}")
            gate, up = gate.chunk(2, dim=-1)
        return GLU(gate, up, self.activation)


class SwiGLU(_GatedModule):
    """nn.Module form of :func:`swiglu` (no parameters; the projections stay in the MLP)."""

    activation = "silu"


class GeGLU(_GatedModule):
    """nn.Module form of :func:`geglu` (tanh-approximated GELU gate)."""

    activation = "gelu_tanh"
