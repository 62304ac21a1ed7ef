"""solkit's kernels as PyTorch custom ops (namespace ``solkit::``), and the eager fast path that skips the dispatcher.

Every public kernel is a :func:`torch.library.custom_op` with a fake (meta) implementation and, when it is
differentiable, an autograd formula (:meth:`~torch.library.CustomOpDef.register_autograd`) whose launches are
custom ops too. torch.compile, torch.export, make_fx and any dispatch mode (FakeTensorMode, FlopCounterMode,
selective activation checkpointing) see ``torch.ops.solkit.<name>`` as one opaque node: Dynamo never traces
into a launcher, so a layer built from these kernels compiles as one graph (docs/kernels/custom_ops.md).

A :class:`KernelOp` is what a family's public function calls. Where nothing traces (plain eager), it runs the
op's implementation itself, through a thin :class:`torch.autograd.Function` when a gradient is wanted, with the
same ``setup_context`` and ``backward`` as the registered op: the dispatcher's Python custom-op path costs
tens of microseconds per call (fills in defaults, checks aliasing, wraps a generated Function), which a
small kernel's launch should not pay. Where anything traces (:func:`traced`), it calls the registered op.

The pattern for a family (``<family>/ops.py``; norms/ops.py is the model):

* ``<name>`` forward op: tensors and scalars in, fresh tensors out (never an input or a view of one; two
  outputs never share storage). What the backward needs (rstd, statistics) is an extra output; whether to
  produce it is a ``bool`` argument the public function sets with :func:`grad_wanted`;
* ``<name>_bwd`` op for the backward launch; ``setup_context(ctx, inputs, output)`` saves tensors and marks the
  extra outputs non-differentiable; ``backward(ctx, *grads)`` calls the ``_bwd`` :class:`KernelOp`;
* dict options (launch configs) travel as a JSON string (:func:`options_json` / :func:`options`); a dict is
  no schema type.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

NAMESPACE = "solkit"
#: Every op defined so far, by its name in the namespace (the test of the ops walks it).
KERNEL_OPS: dict[str, KernelOp] = {}


class _ByHand:
    """Set by :func:`run_by_hand` (a class attribute: Dynamo reads it as a constant and guards on it)."""

    on = False


_BY_HAND = _ByHand


@contextmanager
def run_by_hand() -> Iterator[None]:
    """Skip the dispatcher and treat every input as wanting a gradient: for tools that run the launchers on
    fake tensors and call autograd Functions by hand (tools/arch_check.py), where no op should be traced."""
    before, _BY_HAND.on = _BY_HAND.on, True
    try:
        yield
    finally:
        _BY_HAND.on = before


def traced() -> bool:
    """Whether the dispatcher must see the op: Dynamo is tracing, or a dispatch mode is active (AOTAutograd,
    make_fx, export, FakeTensorMode, FlopCounterMode, selective checkpointing)."""
    if _BY_HAND.on:
        return False
    return torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0


def grad_wanted(*tensors: Any) -> bool:
    """Whether autograd will want the backward of a call on ``tensors`` (so the forward saves what it needs);
    entries that are not tensors (None, scalars) are ignored."""
    if _BY_HAND.on:
        return True
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # noqa: SIM110 - a loop, not any() over a generator (half the time): this runs every call
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


def options_json(opts: dict | None) -> str | None:
    """A launch-options dict as the JSON string the op schema carries (keys sorted: one string per dict)."""
    return None if opts is None else json.dumps(opts, sort_keys=True)


@functools.lru_cache(maxsize=256)
def options(text: str | None) -> dict | None:
    """The dict :func:`options_json` encoded (cached: the same config string decodes once). Read-only."""
    return None if text is None else json.loads(text)


def _eager_function(name: str, impl: Callable, setup_context: Callable, backward: Callable) -> type:
    """The eager path of a differentiable op: a :class:`torch.autograd.Function` running ``impl`` with the op's own
    ``setup_context`` and ``backward`` (one class per op, so ``apply`` takes exactly the op's arguments)."""

    def forward(ctx, *args):
        out = impl(*args)
        setup_context(ctx, args, out)
        return out

    return type(f"Eager_{name}", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})  # fmt: skip


class KernelOp:
    """One custom op ``solkit::<name>``: ``impl`` is its implementation (the launcher), ``fake`` its meta
    implementation, and for a differentiable op ``backward`` / ``setup_context`` as
    :meth:`torch.library.CustomOpDef.register_autograd` takes them. Call it with positional arguments only.
    ``namespace``: another than ``solkit`` only for probes (the overhead benchmark); those are not in
    :data:`KERNEL_OPS`."""

    def __init__(
        self,
        name: str,
        impl: Callable[..., Any],
        fake: Callable[..., Any],
        *,
        backward: Callable[..., Any] | None = None,
        setup_context: Callable[..., Any] | None = None,
        mutates_args: tuple[str, ...] = (),
        namespace: str = NAMESPACE,
    ) -> None:
        self.name = f"{namespace}::{name}"
        self.impl = impl
        self.custom_op = torch.library.custom_op(self.name, impl, mutates_args=mutates_args)
        self.custom_op.register_fake(fake)
        self.backward, self.setup_context = backward, setup_context
        self.eager = None
        if backward is not None:
            self.custom_op.register_autograd(backward, setup_context=setup_context)
            self.eager = _eager_function(name, impl, setup_context, backward)
        self.overload = getattr(getattr(torch.ops, namespace), name).default
        if namespace == NAMESPACE:
            KERNEL_OPS[name] = self

    def __call__(self, *args: Any) -> Any:
        if traced():
            return self.overload(*args)
        if self.eager is not None and grad_wanted(*args):
            return self.eager.apply(*args)
        return self.impl(*args)

    def __repr__(self) -> str:
        return f"KernelOp({self.name})"


def empty_or(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """``t``, or an empty fp32 tensor on ``like``'s device standing for an output not produced (an op returns
    tensors, never None)."""
    return t if t is not None else like.new_empty(0, dtype=torch.float32)
