"""The gated activations as custom ops (``solkit::glu``, ``solkit::glu_bwd``; the activation is an argument),
the differentiable :func:`swiglu` / :func:`geglu` over them, and their modules (docs/kernels/custom_ops.md)."""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.ops import KernelOp, empty_or
from solkit.kernels.gates.glu import gated_backward, gated_forward


def _glu_bwd(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str, with_output: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dgate, dup, out = gated_backward(grad_out, gate, up, activation, with_output)
    return dgate, dup, empty_or(out, gate)


def _glu_bwd_fake(grad_out, gate, up, activation, with_output):
    out = gate.new_empty(gate.shape) if with_output else gate.new_empty(0, dtype=torch.float32)
    return gate.new_empty(gate.shape), up.new_empty(up.shape, dtype=gate.dtype), out


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
    dgate, dup, _ = GLU_BWD(grad_out, gate, up, ctx.activation, False)
    return dgate, dup, None


GLU = KernelOp("glu", _glu, _glu_fake, backward=_glu_backward, setup_context=_glu_setup)


def glu_grads(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", with_output: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The gated activation's backward as a function (the op ``solkit::glu_bwd``): ``(d gate, d up, out)``, where
    ``out`` is ``act(gate) * up`` again, rounded as the forward rounds it, when ``with_output`` (else None). For a
    caller that keeps only gate and up for its backward and needs the product there too (a down projection's
    weight gradient): one more write instead of a second pass over gate and up."""
    dgate, dup, out = GLU_BWD(grad_out, gate, up, activation, bool(with_output))
    return dgate, dup, out if with_output else None


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
