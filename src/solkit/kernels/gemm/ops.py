"""The fused GEMM as custom ops (``solkit::gemm``, differentiable; ``solkit::gemm_out``, into a given buffer), the
public :func:`gemm` and :func:`fused_linear` over them, and ``FusedLinearResidual``, a drop-in o_proj + residual layer.

Forward: ``y = act(x @ W.T + b) * alpha + r * beta`` with the launcher of :mod:`.dispatch`.
Backward, with ``z = x @ W.T + b`` and ``g = alpha * dy * act'(z)``:

    dr = beta * dy,   dx = g @ W,   dW = g.T @ x,   db = g.sum(0)

dx and dW run as torch matmuls (cuBLAS). With an activation, z is **recomputed** in the backward (one
more GEMM, x @ W.T + b) instead of being saved by the forward: it costs no activation memory, which
is what limits training batch sizes, and the o_proj + residual case (no activation) pays nothing.
The backward is plain torch code registered as the op's autograd formula, not an op of its own: under
torch.compile, Inductor sees its matmuls and fuses the activation's derivative into them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from solkit.kernels.common.device import interpreting
from solkit.kernels.common.ops import KernelOp, options, options_json
from solkit.kernels.gemm import dispatch


def _act_grad(z: torch.Tensor, activation: str) -> torch.Tensor:
    """d act(z) / dz in fp32."""
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    if activation == "gelu_tanh":
        c = math.sqrt(2.0 / math.pi)
        u = c * (z + 0.044715 * z**3)
        t = torch.tanh(u)
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)
    raise ValueError(activation)


def _gemm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None, alpha: float,
    beta: float, activation: str, config: str | None, backend: str | None,
) -> torch.Tensor:  # fmt: skip
    return dispatch.gemm(x, weight, bias, residual, alpha=alpha, beta=beta, activation=activation,
                         config=options(config), backend=backend)  # fmt: skip


def _gemm_fake(x, weight, bias, residual, alpha, beta, activation, config, backend):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _gemm_setup(ctx, inputs, output) -> None:
    x, weight, bias, residual, alpha, beta, activation, _config, _backend = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.alpha, ctx.beta, ctx.activation = alpha, beta, activation
    ctx.has_residual = residual is not None


def _gemm_backward(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    K, N = weight.shape[1], weight.shape[0]
    x2 = x.reshape(-1, K)
    dy2 = dy.reshape(-1, N)
    if ctx.activation == "none":
        g = dy2 * ctx.alpha if ctx.alpha != 1.0 else dy2
    else:
        z = x2 @ weight.T if bias is None else torch.addmm(bias.to(x2.dtype), x2, weight.T)
        g = (dy2.float() * ctx.alpha * _act_grad(z.float(), ctx.activation)).to(dy2.dtype)
    dx = dw = db = dr = None
    if ctx.needs_input_grad[0]:
        dx = (g @ weight).reshape(x.shape)
    if ctx.needs_input_grad[1]:
        dw = g.T @ x2
    if bias is not None and ctx.needs_input_grad[2]:
        db = g.float().sum(0).to(bias.dtype)
    if ctx.has_residual and ctx.needs_input_grad[3]:
        dr = dy * ctx.beta if ctx.beta != 1.0 else dy
    return dx, dw, db, dr, None, None, None, None, None


GEMM = KernelOp("gemm", _gemm, _gemm_fake, backward=_gemm_backward, setup_context=_gemm_setup)


def _gemm_out(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
    out: torch.Tensor, alpha: float, beta: float, activation: str, config: str | None, backend: str | None,
) -> None:  # fmt: skip
    dispatch.gemm(x, weight, bias, residual, alpha=alpha, beta=beta, activation=activation, config=options(config),
                  out=out, backend=backend)  # fmt: skip


def _gemm_out_fake(x, weight, bias, residual, out, alpha, beta, activation, config, backend):
    return None


GEMM_OUT = KernelOp("gemm_out", _gemm_out, _gemm_out_fake, mutates_args=("out",))


def gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    activation: str = "none",
    config: dict | None = None,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """``act(x @ weight.T + bias) * alpha + residual * beta`` in one kernel: the op ``solkit::gemm`` (differentiable),
    or with ``out``, ``solkit::gemm_out`` (writes ``out``, no autograd). Arguments as the launcher's
    (:func:`solkit.kernels.gemm.dispatch.gemm`): ``config`` bypasses autotuning, ``backend`` picks Gluon or Triton."""
    cfg = options_json(config)
    if out is not None:
        GEMM_OUT(x, weight, bias, residual, out, float(alpha), float(beta), activation, cfg, backend)
        return out.view(*x.shape[:-1], weight.shape[0])
    return GEMM(x, weight, bias, residual, float(alpha), float(beta), activation, cfg, backend)


def fused_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    activation: str = "none",
) -> torch.Tensor:
    """Differentiable ``act(x @ weight.T + bias) * alpha + residual * beta`` (fused Triton forward; the op
    ``solkit::gemm``).

    On CPU tensors without Triton's interpreter, it computes the same function with torch ops.
    """
    if x.device.type != "cuda" and not interpreting():
        z = torch.nn.functional.linear(x, weight, bias)
        if activation == "silu":
            z = torch.nn.functional.silu(z)
        elif activation == "gelu_tanh":
            z = torch.nn.functional.gelu(z, approximate="tanh")
        elif activation != "none":
            dispatch.check_operands(x, weight, bias, residual, activation)
        z = z * alpha
        return z if residual is None else z + residual * beta
    return GEMM(x, weight, bias, residual, float(alpha), float(beta), activation, None, None)


class FusedLinearResidual(nn.Module):
    """``nn.Linear`` whose forward also adds a residual: ``forward(x, residual) = x @ W.T (+ b) + residual``.

    The add happens in the GEMM's epilogue, so the [..., out_features] product never makes a round
    trip through memory. Weight layout and initialisation are nn.Linear's, so state dicts carry over.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Linear's scheme
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return fused_linear(x, self.weight, self.bias, residual)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
