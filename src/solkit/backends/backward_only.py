"""The backward call alone, as training runs it: the adapter behind the suite's backward rows (``rmsnorm_bwd``,
``layernorm_bwd``, ``softmax_bwd``, ``swiglu_bwd``).

In a training step the forward runs once and saves what its backward needs (the input and the fp32 1/rms for
RMSNorm, the output for softmax, ...); the backward is a separate call that reads those saved tensors and the
output gradient. :func:`backward_only` reproduces that for any backend's autograd: the first call with an input set
runs the backend's forward once (untimed: the bench warms every row up before timing), keeps its autograd graph,
and every call then runs only ``torch.autograd.grad(..., retain_graph=True)`` on it. So each backend is timed on
the saved tensors its own forward chose, with its own backward kernels.

An input set is known by its tensors' storage, shape, dtype and version counter, and the cached entry keeps the
tensors alive (a freed address can never be reused under a stale entry); an input written in place since (its
version moved) gets a fresh forward.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

_KEEP = 8  # input sets kept per row: the bench's rotating pool holds at most 4, plus the checked copy

#: Suite backward rows -> (the forward helper their reference defines, how many inputs it takes); the rest of a
#: row's arguments are the output gradients.
BACKWARD_ROWS = {
    "rmsnorm_bwd": ("_rmsnorm", 2),
    "layernorm_bwd": ("_layernorm", 3),
    "swiglu_bwd": ("_swiglu", 2),
    "softmax_bwd": ("_softmax", 1),
}


def _key(tensors: tuple) -> tuple:
    return tuple(
        (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version) if isinstance(t, torch.Tensor) else t
        for t in tensors
    )


def backward_only(fn: Callable, n_inputs: int) -> Callable:
    """``run(*inputs, *output_grads) -> input gradients`` for the forward ``fn(*inputs)``, timing the backward
    alone (the forward runs once per input set and is kept; see the module docstring)."""
    cache: OrderedDict[tuple, tuple] = OrderedDict()

    def run(*args):
        inputs, grads = args[:n_inputs], args[n_inputs:]
        key = _key(inputs)
        entry = cache.get(key)
        if entry is None:
            with torch.enable_grad():
                leaves = tuple(t.detach().requires_grad_(True) for t in inputs)
                out = fn(*leaves)
            entry = (inputs, leaves, out if isinstance(out, tuple) else (out,))
            cache[key] = entry
            while len(cache) > _KEEP:
                cache.popitem(last=False)
        _, leaves, outs = entry
        g = torch.autograd.grad(outs, leaves, grads, retain_graph=True)
        return g if len(g) > 1 else g[0]

    return run
