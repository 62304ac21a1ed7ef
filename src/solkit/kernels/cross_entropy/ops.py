"""Cross-entropy and fused linear cross-entropy as custom ops, the public functions over them and their modules.

Ops (docs/kernels/custom_ops.md):

* ``solkit::cross_entropy``: ``(loss, z_loss, grad)``; the forward writes ``d loss / d logits`` for a unit
  upstream gradient into ``grad``, a fresh buffer (an empty placeholder when no backward will follow);
* ``solkit::fused_linear_cross_entropy``: ``(loss, z_loss, d_hidden, d_weight, d_bias)``, the logits never
  materialised; gradients as above;

The backward of both only scales the gradients the forward made by the upstream gradient (:func:`_scaled`).

``cross_entropy(..., inplace_grad=True)`` in plain eager writes the gradient over the logits themselves (no second
``[tokens, vocab]`` buffer). No functional op may mutate its input, so that memory saver is an eager-only
:class:`torch.autograd.Function` over the same launcher; wherever the dispatcher must see the call (torch.compile,
export, a dispatch mode), ``solkit::cross_entropy`` runs and the logits are left alone.
"""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.ops import KernelOp, empty_or, grad_wanted, options, options_json, traced
from solkit.kernels.cross_entropy.dispatch import REDUCTIONS, cross_entropy_forward, scale_grad_rows_
from solkit.kernels.cross_entropy.fused_linear import DEFAULT_CHUNK_TOKENS, fused_linear_cross_entropy_forward


def _scaled(grad: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``grad * scale`` (a scalar, or one per row) in fp32, rounded to grad's dtype: in plain eager in place by the
    launcher, rows whose scale is 1 untouched (``loss.backward()`` costs no pass); under tracing a pointwise
    product, which Inductor fuses (an in-place op on a saved tensor would only be copied back by
    functionalization)."""
    if not traced():
        return scale_grad_rows_(grad, scale)
    s = scale.float()
    if s.numel() > 1:
        s = s.reshape(-1, *([1] * (grad.dim() - 1)))
    return (grad.float() * s).to(grad.dtype)


def _loss_fake(rows: int, reduction: str, like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((rows,) if reduction == "none" else (), dtype=torch.float32)


# -------------------------------------------------------------------------------------------- cross-entropy
def _cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, label_smoothing: float, z_loss_scale: float,
    softcap: float | None, reduction: str, with_grad: bool, config: str | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device) if with_grad else None
    loss, z_loss, _ = cross_entropy_forward(
        logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss_scale=z_loss_scale,
        softcap=softcap, reduction=reduction, grad=grad, config=options(config),
    )  # fmt: skip
    return loss, z_loss, empty_or(grad, logits)


def _cross_entropy_fake(logits, targets, ignore_index, label_smoothing, z_loss_scale, softcap, reduction, with_grad,
                        config):  # fmt: skip
    rows = logits.shape[0]
    grad = logits.new_empty(logits.shape) if with_grad else logits.new_empty(0, dtype=torch.float32)
    return _loss_fake(rows, reduction, logits), _loss_fake(rows, reduction, logits), grad


def _grad_setup(ctx, inputs, output) -> None:
    """Save the gradients the forward wrote (outputs 2 on), none of them differentiable."""
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*output[2:])


def _cross_entropy_backward(ctx, grad_loss, *_):
    (grad,) = ctx.saved_tensors
    if grad_loss is None:
        return (None,) * 9
    return _scaled(grad, grad_loss), None, None, None, None, None, None, None, None


CROSS_ENTROPY = KernelOp(
    "cross_entropy", _cross_entropy, _cross_entropy_fake, backward=_cross_entropy_backward, setup_context=_grad_setup
)


class _InplaceCrossEntropy(torch.autograd.Function):
    """Eager only: the gradient is written over the logits (see the module docstring)."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, label_smoothing, z_loss_scale, softcap, reduction, config):
        grad = logits if logits.stride(-1) == 1 else torch.empty_like(logits)
        loss, z_loss, _ = cross_entropy_forward(
            logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing, z_loss_scale=z_loss_scale,
            softcap=softcap, reduction=reduction, grad=grad, config=options(config),
        )  # fmt: skip
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(z_loss)
        return loss, z_loss

    @staticmethod
    def backward(ctx, grad_loss, _grad_z_loss):
        (grad,) = ctx.saved_tensors
        scale_grad_rows_(grad, grad_loss)
        return grad, None, None, None, None, None, None, None


def cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100, label_smoothing: float = 0.0,
    z_loss_scale: float = 0.0, softcap: float | None = None, reduction: str = "mean",
    inplace_grad: bool = True, return_z_loss: bool = False, config: dict | None = None,
):  # fmt: skip
    """Cross-entropy loss (the op ``solkit::cross_entropy``; math in the dispatch module's docstring). In plain
    eager, ``logits`` are overwritten by their gradient when they require grad and ``inplace_grad`` is true. With
    ``return_z_loss``, returns ``(loss, z_loss)``. ``config`` overrides ``CE_CONFIG`` launch settings."""
    cap = float(softcap) if softcap is not None else None
    scalars = (int(ignore_index), float(label_smoothing), float(z_loss_scale), cap, reduction)
    cfg = options_json(config)
    if inplace_grad and grad_wanted(logits) and not traced():
        loss, z_loss = _InplaceCrossEntropy.apply(logits, targets, *scalars, cfg)
    else:
        loss, z_loss, _ = CROSS_ENTROPY(logits, targets, *scalars, grad_wanted(logits), cfg)
    return (loss, z_loss) if return_z_loss else loss


class CrossEntropyLoss(torch.nn.Module):
    """nn.Module form of :func:`cross_entropy` (takes ``[..., V]`` logits and ``[...]`` targets)."""

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss_scale: float = 0.0,
                 softcap: float | None = None, reduction: str = "mean", inplace_grad: bool = True,
                 return_z_loss: bool = False) -> None:  # fmt: skip
        super().__init__()
        if reduction not in REDUCTIONS:
            raise SolkitError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.ignore_index, self.label_smoothing, self.z_loss_scale = ignore_index, label_smoothing, z_loss_scale
        self.softcap, self.reduction, self.inplace_grad = softcap, reduction, inplace_grad
        self.return_z_loss = return_z_loss

    def forward(self, logits: torch.Tensor, targets: torch.Tensor):
        return cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing, z_loss_scale=self.z_loss_scale, softcap=self.softcap,
            reduction=self.reduction, inplace_grad=self.inplace_grad, return_z_loss=self.return_z_loss,
        )  # fmt: skip


# ------------------------------------------------------------------------------- fused linear cross-entropy
def _flce(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bias: torch.Tensor | None, ignore_index: int,
    label_smoothing: float, z_loss_scale: float, softcap: float | None, reduction: str, chunk_tokens: int,
    need_dh: bool, need_dw: bool, need_db: bool, ce_config: str | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    loss, z_loss, dh, dw, db = fused_linear_cross_entropy_forward(
        hidden, weight, targets, bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
        z_loss_scale=z_loss_scale, softcap=softcap, reduction=reduction, chunk_tokens=chunk_tokens,
        need_grads=(need_dh, need_dw, need_db), ce_config=options(ce_config),
    )  # fmt: skip
    return loss, z_loss, empty_or(dh, hidden), empty_or(dw, hidden), empty_or(db, hidden)


def _flce_fake(hidden, weight, targets, bias, ignore_index, label_smoothing, z_loss_scale, softcap, reduction,
               chunk_tokens, need_dh, need_dw, need_db, ce_config):  # fmt: skip
    none = hidden.new_empty(0, dtype=torch.float32)
    dh = hidden.new_empty(hidden.shape) if need_dh else none
    dw = weight.new_empty(weight.shape) if need_dw else none.clone()
    db = bias.new_empty(bias.shape) if need_db and bias is not None else none.clone()
    loss = hidden.new_empty((), dtype=torch.float32)
    return loss, loss.clone(), dh, dw, db


def _flce_backward(ctx, grad_loss, *_):
    dh, dw, db = ctx.saved_tensors
    if grad_loss is None:
        return (None,) * 14
    dh = _scaled(dh, grad_loss) if ctx.needs_input_grad[0] else None
    dw = _scaled(dw, grad_loss) if ctx.needs_input_grad[1] else None
    db = db * grad_loss.to(db.dtype) if ctx.needs_input_grad[3] else None
    return (dh, dw, None, db, *(None,) * 10)


FUSED_LINEAR_CROSS_ENTROPY = KernelOp(
    "fused_linear_cross_entropy", _flce, _flce_fake, backward=_flce_backward, setup_context=_grad_setup
)


def fused_linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bias: torch.Tensor | None = None, *,
    ignore_index: int = -100, label_smoothing: float = 0.0, z_loss_scale: float = 0.0,
    softcap: float | None = None, reduction: str = "mean", chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    return_z_loss: bool = False, ce_config: dict | None = None,
):  # fmt: skip
    """``CE(hidden @ weight^T + bias, targets)`` chunked over tokens (the op ``solkit::fused_linear_cross_entropy``);
    ``hidden`` may be ``[..., H]``."""
    h2 = hidden.reshape(-1, hidden.shape[-1])
    need = (grad_wanted(hidden), grad_wanted(weight), grad_wanted(bias) if bias is not None else False)
    loss, z_loss, *_ = FUSED_LINEAR_CROSS_ENTROPY(
        h2, weight, targets.reshape(-1), bias, int(ignore_index), float(label_smoothing), float(z_loss_scale),
        float(softcap) if softcap is not None else None, reduction, int(chunk_tokens), *need, options_json(ce_config),
    )  # fmt: skip
    return (loss, z_loss) if return_z_loss else loss


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """nn.Module form: ``forward(hidden, weight, targets, bias=None)`` (the LM head's weight is passed in,
    so it stays owned by the model)."""

    def __init__(self, ignore_index: int = -100, label_smoothing: float = 0.0, z_loss_scale: float = 0.0,
                 softcap: float | None = None, reduction: str = "mean", chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                 return_z_loss: bool = False) -> None:  # fmt: skip
        super().__init__()
        if reduction not in ("mean", "sum"):
            raise SolkitError(f"fused_linear_ce: reduction must be 'mean' or 'sum', got {reduction!r}")
        self.ignore_index, self.label_smoothing, self.z_loss_scale = ignore_index, label_smoothing, z_loss_scale
        self.softcap, self.reduction, self.chunk_tokens = softcap, reduction, chunk_tokens
        self.return_z_loss = return_z_loss

    def forward(self, hidden, weight, targets, bias=None):
        return fused_linear_cross_entropy(
            hidden, weight, targets, bias, ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
            z_loss_scale=self.z_loss_scale, softcap=self.softcap, reduction=self.reduction,
            chunk_tokens=self.chunk_tokens, return_z_loss=self.return_z_loss,
        )  # fmt: skip
