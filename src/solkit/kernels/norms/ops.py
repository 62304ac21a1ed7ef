"""The norms as custom ops (``solkit::rmsnorm``, ``solkit::add_rmsnorm``, ``solkit::layernorm`` and their
``_bwd``), the differentiable public functions over them, and the drop-in modules.

The pattern every family follows (docs/kernels/custom_ops.md): the forward op returns fresh tensors, what the
backward needs among them (rstd, the statistics) marked non-differentiable and produced only when
:func:`~solkit.kernels.common.ops.grad_wanted` says a backward will follow; the backward is an op too. The public
functions call :class:`~solkit.kernels.common.ops.KernelOp` objects, which skip the dispatcher in plain eager.
"""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.ops import KernelOp, empty_or, grad_wanted
from solkit.kernels.norms.layer_norm import layernorm_backward_sums, layernorm_forward_stats
from solkit.kernels.norms.rms_norm import Casting, check_casting, rmsnorm_backward, rmsnorm_forward


def _rows(x: torch.Tensor) -> int:
    return x.shape[:-1].numel()


# ---------------------------------------------------------------------------------------------- RMSNorm
def _rmsnorm_bwd(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, ds: torch.Tensor | None,
    offset: float, casting: str,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return rmsnorm_backward(dy, x, weight, rstd, ds=ds, offset=offset, casting=casting)


def _rmsnorm_bwd_fake(dy, x, weight, rstd, ds, offset, casting):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


RMSNORM_BWD = KernelOp("rmsnorm_bwd", _rmsnorm_bwd, _rmsnorm_bwd_fake)


def _rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, casting: str, save_rstd: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    y, _, rstd = rmsnorm_forward(x, weight, eps, offset=offset, casting=casting, save_rstd=save_rstd)
    return y, empty_or(rstd, x)


def _rmsnorm_fake(x, weight, eps, offset, casting, save_rstd):
    return x.new_empty(x.shape), x.new_empty(_rows(x) if save_rstd else 0, dtype=torch.float32)


def _rmsnorm_setup(ctx, inputs, output) -> None:
    x, weight, _eps, offset, casting, _save = inputs
    rstd = output[-1]
    ctx.mark_non_differentiable(rstd)
    ctx.set_materialize_grads(False)  # no zeros are made for rstd's (or an unused sum's) gradient
    ctx.save_for_backward(x if len(output) == 2 else output[0], weight, rstd)
    ctx.offset, ctx.casting = offset, casting


def _rmsnorm_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    if dy is None:
        return None, None, None, None, None, None
    dx, dw = RMSNORM_BWD(dy, x, weight, rstd, None, ctx.offset, ctx.casting)
    return dx, dw, None, None, None, None


RMSNORM = KernelOp("rmsnorm", _rmsnorm, _rmsnorm_fake, backward=_rmsnorm_backward, setup_context=_rmsnorm_setup)


def _add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, casting: str,
    save_rstd: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    y, s, rstd = rmsnorm_forward(x, weight, eps, residual=residual, offset=offset, casting=casting,
                                 save_rstd=save_rstd)  # fmt: skip
    return s, y, empty_or(rstd, x)


def _add_rmsnorm_fake(x, residual, weight, eps, offset, casting, save_rstd):
    return x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty(_rows(x) if save_rstd else 0, dtype=torch.float32)


def _add_rmsnorm_setup(ctx, inputs, output) -> None:
    _rmsnorm_setup(ctx, (inputs[0], *inputs[2:]), output)  # saves the sum (output 0), which the norm read


def _add_rmsnorm_backward(ctx, ds, dy, _drstd):
    s, weight, rstd = ctx.saved_tensors
    if dy is None:  # only the sum is used downstream: the norm contributes nothing
        return ds, ds, None, None, None, None, None
    dx, dw = RMSNORM_BWD(dy, s, weight, rstd, ds, ctx.offset, ctx.casting)
    return dx, dx, dw, None, None, None, None


ADD_RMSNORM = KernelOp(
    "add_rmsnorm", _add_rmsnorm, _add_rmsnorm_fake, backward=_add_rmsnorm_backward, setup_context=_add_rmsnorm_setup
)


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, offset: float = 0.0, casting: Casting = "llama"
) -> torch.Tensor:
    """RMSNorm over the last dimension (differentiable; the op ``solkit::rmsnorm``)."""
    return RMSNORM(x, weight, float(eps), float(offset), casting, grad_wanted(x, weight))[0]


def add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting: Casting = "llama",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``s = x + residual; return s, rmsnorm(s)`` in one pass (differentiable; ``solkit::add_rmsnorm``)."""
    s, y, _ = ADD_RMSNORM(x, residual, weight, float(eps), float(offset), casting, grad_wanted(x, residual, weight))
    return s, y


# -------------------------------------------------------------------------------------------- LayerNorm
def _layernorm_bwd(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stats: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return layernorm_backward_sums(dy, x, weight, stats[0], stats[1], has_bias=has_bias)


def _layernorm_bwd_fake(dy, x, weight, stats, has_bias):
    return x.new_empty(x.shape), weight.new_empty(weight.shape[0] * (2 if has_bias else 1))


LAYERNORM_BWD = KernelOp("layernorm_bwd", _layernorm_bwd, _layernorm_bwd_fake)


def _layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, save_stats: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    y, stats = layernorm_forward_stats(x, weight, bias, eps, save_stats=save_stats)
    return y, empty_or(stats, x)


def _layernorm_fake(x, weight, bias, eps, save_stats):
    stats = x.new_empty((2, _rows(x)) if save_stats else (0,), dtype=torch.float32)
    return x.new_empty(x.shape), stats


def _layernorm_setup(ctx, inputs, output) -> None:
    x, weight, bias, _eps, _save = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(x, weight, output[1])
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _layernorm_backward(ctx, dy, _dstats):
    x, weight, stats = ctx.saved_tensors
    if dy is None:
        return None, None, None, None, None
    dx, sums = LAYERNORM_BWD(dy, x, weight, stats, ctx.bias_dtype is not None)
    n = weight.shape[0]
    db = sums[n:].to(ctx.bias_dtype) if ctx.bias_dtype is not None else None
    return dx, sums[:n], db, None, None


LAYERNORM = KernelOp(
    "layernorm", _layernorm, _layernorm_fake, backward=_layernorm_backward, setup_context=_layernorm_setup
)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5):
    """LayerNorm over the last dimension (differentiable; the op ``solkit::layernorm``)."""
    return LAYERNORM(x, weight, bias, float(eps), grad_wanted(x, weight, bias))[0]


# ---------------------------------------------------------------------------------------------- modules
class RMSNorm(torch.nn.Module):
    """Drop-in RMSNorm module. ``offset=1.0, casting="gemma"`` with zero-initialised weight is Gemma's."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting: Casting = "llama",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_casting(casting)
        init = torch.zeros if offset else torch.ones
        self.weight = torch.nn.Parameter(init(hidden_size, device=device, dtype=dtype))
        self.eps, self.offset, self.casting = eps, offset, casting

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps, self.offset, self.casting)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, offset={self.offset}, casting={self.casting!r}"


class AddRMSNorm(RMSNorm):
    """Fused ``residual + x`` followed by RMSNorm; ``forward(x, residual) -> (sum, normed)``."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return add_rmsnorm(x, residual, self.weight, self.eps, self.offset, self.casting)


class LayerNorm(torch.nn.Module):
    """Drop-in replacement for ``torch.nn.LayerNorm(hidden_size)`` over the last dimension."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if hidden_size <= 0:
            raise SolkitError(f"LayerNorm hidden_size: must be positive, got {hidden_size}")
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype)) if bias else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, bias={self.bias is not None}"
