"""One step of a model in a mode (fwd, fwd_bwd, train_step), as it runs and as the analysis traces it.

The measured step and the traced step run the same code: the model's forward (with its labels when it
has them), the backward from its loss, and for ``train_step`` an AdamW update. The traced step runs
on meta tensors through ``torch.func.functional_call``, with every parameter and buffer an input of
the step, so their bytes are counted where the ops read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.func import functional_call

from solkit.errors import SolkitError, choices_hint
from solkit.zoo import Built

MODES = ("fwd", "fwd_bwd", "train_step")
#: Named profiler scope around the optimizer's step (the category table names it too).
OPTIMIZER_SCOPE = "solkit.optimizer"
LR = 1e-4


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise SolkitError(choices_hint(mode, MODES, "--mode"))
    return mode


def loss_of(out: Any) -> torch.Tensor:
    """The scalar the backward starts from: the output's ``loss``, else the sum of its first tensor."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, dict):
        out = next(iter(out.values()), None)
    elif isinstance(out, (tuple, list)):
        out = out[0] if out else None
    if hasattr(out, "logits"):
        out = out.logits
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise SolkitError("the model's output has no loss and no floating-point tensor to start a backward from")
    return out.sum()


def _call(model: Callable, args: tuple, kwargs: dict, labels: torch.Tensor | None) -> Any:
    if labels is not None:
        return model(*args, **kwargs, labels=labels)
    return model(*args, **kwargs)


def make_optimizer(params: list[torch.Tensor], traced: bool = False) -> torch.optim.Optimizer:
    """AdamW on its per-tensor path, so that each of its ops is a counted aten op.

    (torch's default on a GPU, the multi-tensor ``_foreach`` path, makes the same passes over memory in
    fewer launches.) The traced copy takes the ``differentiable`` branch, which keeps the step counter a
    tensor: the measured one reads it with ``.item()``, which a meta tensor cannot do. Both run the
    same per-element ops (mul_, lerp_, addcmul_, sqrt, div, add_, addcdiv_) on the same shapes.
    """
    return torch.optim.AdamW(params, lr=LR, foreach=False, differentiable=traced)


def real_step(built: Built, mode: str, runner: Callable | None = None) -> Callable[[], Any]:
    """A closure that runs one step of ``built`` in ``mode`` (``runner``: the compiled model, if any)."""
    model = built.model
    run = runner if runner is not None else model
    opt = None
    if mode == "train_step":
        opt = make_optimizer([p for p in model.parameters() if p.requires_grad])

    def step() -> Any:
        if mode == "fwd":
            with torch.no_grad():
                return _call(run, built.args, built.kwargs, built.labels)
        model.zero_grad(set_to_none=True)
        loss = loss_of(_call(run, built.args, built.kwargs, built.labels))
        loss.backward()
        if opt is not None:
            with torch.profiler.record_function(OPTIMIZER_SCOPE):
                opt.step()
        return loss

    return step


def _meta_like(t: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
    m = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    return m.requires_grad_(True) if requires_grad else m


def meta_step(built: Built, mode: str) -> tuple[Callable[..., Any], tuple]:
    """The step as a function of (params, buffers, args, kwargs, labels) for the meta-tensor trace.

    Returns the function and its arguments: every parameter and buffer is a meta input, so the
    analysis charges their bytes to the ops that read them. For ``train_step`` the AdamW state is
    created beforehand, as the measured step has it after warm-up; it updates stand-ins of the
    parameters (the gradients are what it reads).
    """
    model = built.model
    grad = mode != "fwd"
    params = {n: _meta_like(p, grad and p.requires_grad) for n, p in model.named_parameters()}
    buffers = {n: _meta_like(b) for n, b in model.named_buffers()}
    trained = [p for p in params.values() if p.requires_grad]
    opt = None
    if mode == "train_step" and trained:
        stand_ins = [_meta_like(p) for p in trained]
        opt = make_optimizer(stand_ins, traced=True)
        for q in stand_ins:
            opt.state[q] = {"step": _meta_like(torch.zeros(())), "exp_avg": _meta_like(q), "exp_avg_sq": _meta_like(q)}

    def fn(params, buffers, args, kwargs, labels):
        ctx = torch.no_grad() if mode == "fwd" else contextlib.nullcontext()
        with ctx:
            out = functional_call(model, {**params, **buffers}, args, {**kwargs, **_labels(labels)})
        if mode == "fwd":
            return out
        leaves = [p for p in params.values() if p.requires_grad]
        grads = torch.autograd.grad(loss_of(out), leaves, allow_unused=True)
        if opt is None:
            return grads
        for q, g in zip(opt.param_groups[0]["params"], grads):
            q.grad = g
        opt.step()
        return opt.param_groups[0]["params"]

    return fn, (params, buffers, built.args, built.kwargs, built.labels)


def _labels(labels: torch.Tensor | None) -> dict:
    return {} if labels is None else {"labels": labels}
