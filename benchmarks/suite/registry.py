"""Ops and their implementations, registered per op (the way tritonbench registers operators).

An op knows its shape (``dims``), how to build random inputs, an fp64 reference (forward, and through autograd
the backward), and the minimum bytes and FLOPs of one call (the SOL's work). An implementation factory takes
the op's context and returns ``fn(inputs) -> output``, or raises :class:`Unavailable` with the reason.
Implementations: ``solkit`` (the public face ``solkit.kernels``), ``torch`` (eager), ``compile``
(``torch.compile`` of the eager code), ``liger`` (``solkit.backends.liger``, when ``liger_kernel`` imports),
and ``copy``: the copy floor, ``dst.copy_(src)`` moving the op's bytes (no output to check).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = 1e-5
DIRECTIONS = ("fwd", "fwd_bwd")


class Unavailable(Exception):
    """An implementation that cannot run here; the message is the reason recorded with the skip."""


@dataclass
class Context:
    op: Op
    shape: tuple[int, ...]
    dtype: torch.dtype
    direction: str
    device: torch.device


@dataclass
class Op:
    name: str
    dims: str  # what the shape's numbers are, e.g. "rows, cols"
    make: Callable[[tuple[int, ...], torch.dtype, torch.device, torch.Generator], dict[str, torch.Tensor]]
    torch_fn: Callable[..., Any]  # the eager formula; also the fp64 reference, run on upcast inputs
    bytes_fwd: Callable[[tuple[int, ...], int], float]
    bytes_bwd: Callable[[tuple[int, ...], int], float] | None = None  # None: no backward
    flops: Callable[[tuple[int, ...]], float] = lambda shape: 0.0
    grads: tuple[str, ...] = ()  # inputs the backward differentiates
    impls: dict[str, Callable[[Context], Callable[[dict], Any]]] = field(default_factory=dict)

    def cost(self, shape: tuple[int, ...], itemsize: int, direction: str) -> tuple[float, float]:
        """(bytes, FLOPs) of one call: the least traffic the op needs (each tensor once)."""
        nbytes = self.bytes_fwd(shape, itemsize)
        if direction == "fwd_bwd":
            nbytes += self.bytes_bwd(shape, itemsize)
        return nbytes, self.flops(shape) * (3 if direction == "fwd_bwd" else 1)


def _rand(shape, dtype, device, gen, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def _rows(shape, dtype, device, gen):
    r, c = shape
    return {"x": _rand((r, c), dtype, device, gen), "w": _rand((c,), dtype, device, gen, 0.1) + 1}


def _add_rows(shape, dtype, device, gen):
    return {**_rows(shape, dtype, device, gen), "r": _rand(shape, dtype, device, gen)}


def _layernorm_rows(shape, dtype, device, gen):
    return {**_rows(shape, dtype, device, gen), "b": _rand((shape[1],), dtype, device, gen, 0.1)}


def _gates(shape, dtype, device, gen):
    return {"g": _rand(shape, dtype, device, gen), "u": _rand(shape, dtype, device, gen)}


def _ce(shape, dtype, device, gen):
    r, v = shape
    t = torch.randint(0, v, (r,), generator=gen).to(device)
    return {"z": _rand((r, v), dtype, device, gen, 2.0), "t": t}


def _rope(shape, dtype, device, gen):
    b, s, hq, hk, d = shape
    pos = torch.arange(s, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.cat([pos, pos], dim=-1)
    q, k = _rand((b, s, hq, d), dtype, device, gen), _rand((b, s, hk, d), dtype, device, gen)
    return {"q": q, "k": k, "cos": ang.cos().to(device, dtype), "sin": ang.sin().to(device, dtype)}


def _gemm(shape, dtype, device, gen):
    m, n, k = shape
    return {"x": _rand((m, k), dtype, device, gen), "w": _rand((n, k), dtype, device, gen, 1 / math.sqrt(k))}


def _gemm_residual(shape, dtype, device, gen):
    return {**_gemm(shape, dtype, device, gen), "r": _rand(shape[:2], dtype, device, gen)}


def _flat(shape, dtype, device, gen):
    return {"x": _rand(shape, dtype, device, gen)}


def _upcast(t):
    return t if t.dtype == torch.float64 else t.float()


def _rms(x, w):
    xf = _upcast(x)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.to(xf.dtype)).to(x.dtype)


def _rope_ref(q, k, cos, sin):
    def rot(t):
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat([-t2, t1], dim=-1)

    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([(q * c + rot(q) * s).flatten(), (k * c + rot(k) * s).flatten()])


def _rows2(shape, s):
    return shape[0] * shape[1] * s


OPS: dict[str, Op] = {
    "rmsnorm": Op("rmsnorm", "rows, cols", _rows, lambda x, w: _rms(x, w),
                  lambda sh, s: 2 * _rows2(sh, s), lambda sh, s: 3 * _rows2(sh, s), grads=("x", "w")),
    "add_rmsnorm": Op("add_rmsnorm", "rows, cols", _add_rows, lambda x, w, r: _rms(x + r, w),
                      lambda sh, s: 4 * _rows2(sh, s), lambda sh, s: 3 * _rows2(sh, s), grads=("x", "r", "w")),
    "layernorm": Op("layernorm", "rows, cols", _layernorm_rows,
                    lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
                    lambda sh, s: 2 * _rows2(sh, s), lambda sh, s: 3 * _rows2(sh, s), grads=("x", "w", "b")),
    "softmax": Op("softmax", "rows, cols", _flat, lambda x: torch.softmax(x, dim=-1),
                  lambda sh, s: 2 * _rows2(sh, s), lambda sh, s: 3 * _rows2(sh, s), grads=("x",)),
    "cross_entropy": Op("cross_entropy", "rows, vocab", _ce, lambda z, t: F.cross_entropy(_upcast(z), t),
                        lambda sh, s: _rows2(sh, s), lambda sh, s: _rows2(sh, s), grads=("z",)),
    "swiglu": Op("swiglu", "rows, cols", _gates, lambda g, u: F.silu(g) * u,
                 lambda sh, s: 3 * _rows2(sh, s), lambda sh, s: 5 * _rows2(sh, s), grads=("g", "u")),
    "geglu": Op("geglu", "rows, cols", _gates, lambda g, u: F.gelu(g, approximate="tanh") * u,
                lambda sh, s: 3 * _rows2(sh, s), lambda sh, s: 5 * _rows2(sh, s), grads=("g", "u")),
    "rope": Op("rope", "batch, seq, q_heads, kv_heads, head_dim", _rope, _rope_ref,
               lambda sh, s: 2 * sh[0] * sh[1] * (sh[2] + sh[3]) * sh[4] * s,
               lambda sh, s: 2 * sh[0] * sh[1] * (sh[2] + sh[3]) * sh[4] * s, grads=("q", "k")),
    "gemm": Op("gemm", "M, N, K", _gemm, lambda x, w: x @ w.T,
               lambda sh, s: (sh[0] * sh[2] + sh[1] * sh[2] + sh[0] * sh[1]) * s,
               flops=lambda sh: 2 * sh[0] * sh[1] * sh[2]),
    "gemm_residual": Op("gemm_residual", "M, N, K", _gemm_residual, lambda x, w, r: x @ w.T + r,
                        lambda sh, s: (sh[0] * sh[2] + sh[1] * sh[2] + 2 * sh[0] * sh[1]) * s,
                        flops=lambda sh: 2 * sh[0] * sh[1] * sh[2]),
    "read": Op("read", "elements", _flat, lambda x: _upcast(x).sum(), lambda sh, s: math.prod(sh) * s),
}  # fmt: skip


def _solkit(name: str, call: Callable[..., Any]) -> Callable[[Context], Callable[[dict], Any]]:
    def factory(ctx: Context):
        import solkit.kernels as K

        fn = getattr(K, name)
        return lambda inp: call(fn, inp)

    return factory


def _torch(ctx: Context):
    return lambda inp: ctx.op.torch_fn(**inp)


def _compile(ctx: Context):
    if ctx.device.type != "cuda":
        raise Unavailable("torch.compile is timed on a GPU only")
    fn = torch.compile(ctx.op.torch_fn, dynamic=False)
    return lambda inp: fn(**inp)


def _liger(call: Callable[..., Any]) -> Callable[[Context], Callable[[dict], Any]]:
    def factory(ctx: Context):
        if importlib.util.find_spec("liger_kernel") is None:
            raise Unavailable("liger_kernel is not installed")
        if ctx.device.type != "cuda":
            raise Unavailable("Liger's kernels need a GPU")
        from solkit.backends import liger

        return lambda inp: call(liger, inp)

    return factory


def _copy(ctx: Context):
    nbytes, _ = ctx.op.cost(ctx.shape, ctx.dtype.itemsize, ctx.direction)
    n = max(int(nbytes // 2 // ctx.dtype.itemsize), 1)  # read n, write n: the op's bytes
    src = torch.empty(n, dtype=ctx.dtype, device=ctx.device).uniform_()
    dst = torch.empty_like(src)
    return lambda inp: dst.copy_(src)


SOLKIT_CALLS = {
    "rmsnorm": lambda K, i: K(i["x"], i["w"], eps=EPS),
    "add_rmsnorm": lambda K, i: K(i["x"], i["r"], i["w"], eps=EPS)[1],  # (x + r, rmsnorm(x + r))
    "layernorm": lambda K, i: K(i["x"], i["w"], i["b"], eps=EPS),
    "softmax": lambda K, i: K(i["x"]),
    "cross_entropy": lambda K, i: K(i["z"], i["t"]),
    "swiglu": lambda K, i: K(i["g"], i["u"]),
    "geglu": lambda K, i: K(i["g"], i["u"]),
    "rope": lambda K, i: torch.cat([t.flatten() for t in K(i["q"], i["k"], i["cos"], i["sin"])]),
    "gemm": lambda K, i: K(i["x"], i["w"]),
    "gemm_residual": lambda K, i: K(i["x"], i["w"], residual=i["r"]),
}
SOLKIT_NAMES = {"gemm_residual": "gemm", "rope": "apply_rope"}
LIGER_CALLS = {
    "rmsnorm": lambda L, i: L.rms_norm(i["x"], i["w"]),
    "add_rmsnorm": lambda L, i: L.add_rms_norm(i["x"], i["r"], i["w"])[1],
    "layernorm": lambda L, i: L.layer_norm(i["x"], i["w"], i["b"]),
    "softmax": lambda L, i: L.softmax(i["x"]),
    "cross_entropy": lambda L, i: L.cross_entropy(i["z"], i["t"]),
    "swiglu": lambda L, i: L.swiglu(i["g"], i["u"]),
    "geglu": lambda L, i: L.geglu(i["g"], i["u"]),
    "rope": lambda L, i: torch.cat([t.flatten() for t in L.rope(i["q"], i["k"], i["cos"], i["sin"])]),
}

for _name, _op in OPS.items():
    _op.impls["torch"] = _torch
    if _name in SOLKIT_CALLS:
        _op.impls["solkit"] = _solkit(SOLKIT_NAMES.get(_name, _name), SOLKIT_CALLS[_name])
    _op.impls["compile"] = _compile
    if _name in LIGER_CALLS:
        _op.impls["liger"] = _liger(LIGER_CALLS[_name])
    _op.impls["copy"] = _copy

IMPLS = ("solkit", "torch", "compile", "liger", "copy")
