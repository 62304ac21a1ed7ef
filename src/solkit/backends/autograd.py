"""Adapters that turn a forward function into a ``fwd_bwd`` problem's ``run``: forward outputs, then
the input gradients through the backend's own autograd (``torch.autograd.grad``, never ``.grad``)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def vjp(fn: Callable, inputs: tuple, grads: tuple) -> tuple[tuple, tuple]:
    """Forward ``fn(*inputs)`` then the gradients w.r.t. ``inputs`` for output cotangents ``grads``."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.autograd.grad(outs, leaves, grads)
    return tuple(o.detach() for o in outs), g


def bwd_rmsnorm(f):
    return lambda x, w, dy: (lambda o, g: (o[0], g[0], g[1]))(*vjp(f, (x, w), (dy,)))


def bwd_layernorm(f):
    return lambda x, w, b, dy: (lambda o, g: (o[0], *g))(*vjp(f, (x, w, b), (dy,)))


def bwd_gate(f):
    return lambda gate, up, dy: (lambda o, g: (o[0], *g))(*vjp(f, (gate, up), (dy,)))


def bwd_softmax(f):
    return lambda x, dy: (lambda o, g: (o[0], g[0]))(*vjp(f, (x,), (dy,)))


def bwd_rope(f):
    def run(q, k, cos, sin, dq, dk):
        (qo, ko), (gq, gk) = vjp(lambda a, b: f(a, b, cos, sin), (q, k), (dq, dk))
        return qo, ko, gq, gk

    return run


def bwd_attn(f):
    return lambda q, k, v, do: (lambda o, g: (o[0], *g))(*vjp(f, (q, k, v), (do,)))


def bwd_embedding(f):
    """``run(ids, weight, dy) -> (rows, d weight)`` for a lookup ``f(ids, weight)`` (ids are not differentiated)."""

    def run(ids, weight, dy):
        (y,), (dw,) = vjp(lambda w: f(ids, w), (weight,), (dy,))
        return y, dw

    return run


def bwd_ce(loss_fn):
    def run(logits, targets):
        (loss,), (dz,) = vjp(lambda z: loss_fn(z, targets), (logits,), (torch.ones((), device=logits.device),))
        return loss, dz

    return run


def bwd_flce(loss_fn):
    def run(h, w, targets):
        one = torch.ones((), device=h.device)
        (loss,), (dh, dw) = vjp(lambda a, b: loss_fn(a, b, targets), (h, w), (one,))
        return loss, dh, dw

    return run


# Forward helpers the reference of each fwd_bwd problem defines (compiled by the "compile" backend).
FWD_HELPERS = {
    "rmsnorm_bwd": ("_rmsnorm", bwd_rmsnorm),
    "layernorm_bwd": ("_layernorm", bwd_layernorm),
    "swiglu_bwd": ("_swiglu", bwd_gate),
    "softmax_bwd": ("_softmax", bwd_softmax),
    "attention_causal_bwd": ("_attn", bwd_attn),
}
