"""One step of a model in a mode (fwd, fwd_bwd, train_step), as it runs and as the analysis traces it.

The measured step and the traced step run the same code: the model's forward (with its labels when it
has them), the backward from its loss, and for ``train_step`` the optimizer's update (the user's,
else AdamW as PyTorch makes it: multi-tensor on CUDA). The traced step runs
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


#: ``optimizer=`` of :func:`solkit.model.analyze`: an optimizer, a function of the parameters, or AdamW by name.
OptimizerArg = torch.optim.Optimizer | Callable[[list], torch.optim.Optimizer] | str | None
#: AdamW implementations by name (``--optimizer``): PyTorch's own choice, or one forced.
ADAMW = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}


def make_optimizer(params: list[torch.Tensor], optimizer: OptimizerArg = None) -> torch.optim.Optimizer:
    """The optimizer of a training step: ``optimizer`` as given, else AdamW as PyTorch makes it.

    PyTorch's AdamW picks its implementation itself: the multi-tensor ``_foreach`` path when every
    parameter is on a CUDA device, the per-tensor loop otherwise; ``"fused"`` (and the other names of
    :data:`ADAMW`) force one. A function is called with the parameters; an optimizer is used as it is.
    """
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if callable(optimizer):
        opt = optimizer(params)
        if not isinstance(opt, torch.optim.Optimizer):
            raise SolkitError(f"optimizer: the function returned a {type(opt).__name__}, not a torch.optim.Optimizer")
        return opt
    name = optimizer or "default"
    if name not in ADAMW:
        raise SolkitError(choices_hint(name, list(ADAMW), "--optimizer"))
    return torch.optim.AdamW(params, lr=LR, **ADAMW[name])


def trace_twin(real: torch.optim.Optimizer, stand_in: dict[int, torch.Tensor]) -> torch.optim.Optimizer:
    """The same optimizer (class, groups, options) on meta stand-ins of its parameters, for the trace.

    An implementation left to PyTorch (``foreach=None``) is resolved as PyTorch resolves it for the real
    parameters (multi-tensor on CUDA), since on meta tensors it would choose the per-tensor loop.
    """
    groups = []
    for g in real.param_groups:
        opts = {k: v for k, v in g.items() if k != "params"}
        if "foreach" in opts and opts["foreach"] is None and not opts.get("fused"):
            opts["foreach"] = bool(g["params"]) and all(p.is_cuda for p in g["params"])
        if "capturable" in opts:  # step counters stay tensors (see _as_compiled); the same per-element passes
            opts["capturable"] = True
        groups.append({**opts, "params": [stand_in[id(p)] for p in g["params"] if id(p) in stand_in]})
    try:
        return type(real)([g for g in groups if g["params"]])
    except Exception as e:  # an optimizer whose constructor needs more than its param groups
        raise SolkitError(f"optimizer {type(real).__name__}: cannot rebuild it on meta tensors: {e}") from None


def describe(opt: torch.optim.Optimizer) -> str:
    """``AdamW (foreach)``: the class and the implementation its first group runs (as PyTorch resolves it)."""
    g = opt.param_groups[0] if opt.param_groups else {}
    if g.get("fused"):
        impl = "fused"
    elif "foreach" in g:
        foreach = g["foreach"]
        if foreach is None:
            foreach = bool(g["params"]) and all(p.is_cuda for p in g["params"])
        impl = "foreach" if foreach else "for-loop"
    else:
        impl = ""
    return f"{type(opt).__name__} ({impl})" if impl else type(opt).__name__


def _copy_state(real: torch.optim.Optimizer, twin: torch.optim.Optimizer, stand_in: dict[int, torch.Tensor]) -> None:
    """The real optimizer's state (after its warm-up steps) as meta tensors on the twin's stand-ins."""
    for p, st in real.state.items():
        q = stand_in.get(id(p))
        if q is not None:
            twin.state[q] = {k: _meta_like(v) if isinstance(v, torch.Tensor) else v for k, v in st.items()}


@contextlib.contextmanager
def _as_compiled():
    """Run the twin's step as torch.compile traces it, so that a meta tensor is never asked for its value.

    An eager optimizer reads its step counters with ``.item()`` (a meta tensor has none). The twin is
    built ``capturable`` (counters and bias corrections stay tensors: the same per-element passes over
    parameters, gradients and state, with 0-dim tensors for scalars), and PyTorch checks that a capturable
    optimizer's tensors are on a GPU except while compiling. Only the twin's step in the trace runs inside.
    """
    real = torch.compiler.is_compiling
    torch.compiler.is_compiling = lambda: True
    try:
        yield
    finally:
        torch.compiler.is_compiling = real


def real_step(
    built: Built, mode: str, runner: Callable | None = None, opt: torch.optim.Optimizer | None = None
) -> Callable[[], Any]:
    """A closure that runs one step of ``built`` in ``mode`` (``runner``: the compiled model, if any; ``opt``:
    the optimizer of a ``train_step``)."""
    model = built.model
    run = runner if runner is not None else model
    if mode != "train_step":
        opt = None

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


def meta_step(
    built: Built, mode: str, real_opt: torch.optim.Optimizer | None = None
) -> tuple[Callable[..., Any], tuple]:
    """The step as a function of (params, buffers, args, kwargs, labels) for the meta-tensor trace.

    Returns the function and its arguments: every parameter and buffer is a meta input, so the
    analysis charges their bytes to the ops that read them. For ``train_step`` the AdamW state is
    ``real_opt`` (default: :func:`make_optimizer` on the model's trained parameters) is the measured
    step's optimizer: its twin (same class, groups and options) updates meta stand-ins of the parameters
    (the gradients are what it reads), with the real one's state after its warm-up steps copied onto
    them as meta tensors (an optimizer with no state yet creates it inside the trace).
    """
    model = built.model
    grad = mode != "fwd"
    params = {n: _meta_like(p, grad and p.requires_grad) for n, p in model.named_parameters()}
    buffers = {n: _meta_like(b) for n, b in model.named_buffers()}
    real_trained = [p for p in model.parameters() if p.requires_grad]
    opt, stand_ins = None, []
    if mode == "train_step" and real_trained:
        real_opt = real_opt or make_optimizer(real_trained)
        stand_ins = [_meta_like(p) for p in real_trained]
        by_id = {id(p): q for p, q in zip(real_trained, stand_ins)}
        opt = trace_twin(real_opt, by_id)
        _copy_state(real_opt, opt, by_id)

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
        for q, g in zip(stand_ins, grads):
            q.grad = g
        with _as_compiled():
            opt.step()
        return stand_ins

    return fn, (params, buffers, built.args, built.kwargs, built.labels)


def _labels(labels: torch.Tensor | None) -> dict:
    return {} if labels is None else {"labels": labels}
