"""Backends: every implementation the main job measures, as a registry of solutions per problem.

A backend maps a suite problem name to a factory; the factory takes the problem's reference ``run``
and returns a callable with the same signature and outputs. Availability is decided at run time
(``solkit bench --list-backends``):

* ``eager``: the reference itself (PyTorch eager);
* ``compile``: ``torch.compile`` of the reference's forward (backward through AOTAutograd);
* ``vendor``: the library path a framework would call (cuBLAS ``addmm`` with beta=1, ``F.rms_norm``,
  ``F.scaled_dot_product_attention``, ...);
* ``liger``: Liger-Kernel's Triton kernels, when importable;
* ``solkit``: solkit's own Triton kernels (GPU only: on the CPU they would run in Triton's
  interpreter, whose timings mean nothing).

Problems whose ``solkit.mode`` is ``fwd_bwd`` return the forward outputs and the input gradients,
computed through each backend's autograd with ``torch.autograd.grad`` (never accumulating ``.grad``).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

Factory = Callable[[Callable], Callable]
EPS = 1e-5  # every norm in the suite uses eps = 1e-5


def vjp(fn: Callable, inputs: tuple, grads: tuple) -> tuple[tuple, tuple]:
    """Forward ``fn(*inputs)`` then the gradients w.r.t. ``inputs`` for output cotangents ``grads``."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.autograd.grad(outs, leaves, grads)
    return tuple(o.detach() for o in outs), g


# Adapters turning a forward function into each fwd_bwd problem's ``run`` signature.
def _bwd_rmsnorm(f):
    return lambda x, w, dy: (lambda o, g: (o[0], g[0], g[1]))(*vjp(f, (x, w), (dy,)))


def _bwd_layernorm(f):
    return lambda x, w, b, dy: (lambda o, g: (o[0], *g))(*vjp(f, (x, w, b), (dy,)))


def _bwd_gate(f):
    return lambda gate, up, dy: (lambda o, g: (o[0], *g))(*vjp(f, (gate, up), (dy,)))


def _bwd_softmax(f):
    return lambda x, dy: (lambda o, g: (o[0], g[0]))(*vjp(f, (x,), (dy,)))


def _bwd_rope(f):
    def run(q, k, cos, sin, dq, dk):
        (qo, ko), (gq, gk) = vjp(lambda a, b: f(a, b, cos, sin), (q, k), (dq, dk))
        return qo, ko, gq, gk

    return run


def _bwd_attn(f):
    return lambda q, k, v, do: (lambda o, g: (o[0], *g))(*vjp(f, (q, k, v), (do,)))


def _bwd_ce(loss_fn):
    def run(logits, targets):
        (loss,), (dz,) = vjp(lambda z: loss_fn(z, targets), (logits,), (torch.ones((), device=logits.device),))
        return loss, dz

    return run


def _bwd_flce(loss_fn):
    def run(h, w, targets):
        one = torch.ones((), device=h.device)
        (loss,), (dh, dw) = vjp(lambda a, b: loss_fn(a, b, targets), (h, w), (one,))
        return loss, dh, dw

    return run


# Forward helpers the reference of each fwd_bwd problem defines (compiled by the "compile" backend).
FWD_HELPERS = {
    "rmsnorm_bwd": ("_rmsnorm", _bwd_rmsnorm),
    "layernorm_bwd": ("_layernorm", _bwd_layernorm),
    "swiglu_bwd": ("_swiglu", _bwd_gate),
    "softmax_bwd": ("_softmax", _bwd_softmax),
    "attention_causal_bwd": ("_attn", _bwd_attn),
}


@dataclass
class Backend:
    name: str
    description: str
    impls: dict[str, Factory] = field(default_factory=dict)
    requires_cuda: bool = False
    module: str | None = None  # import needed for availability

    def available(self, device: str) -> tuple[bool, str]:
        if self.requires_cuda and not device.startswith("cuda"):
            return False, "needs a CUDA device (Triton's CPU interpreter is not a benchmark)"
        if self.module:
            try:
                importlib.import_module(self.module)
            except Exception as exc:  # noqa: BLE001 - any import failure means unavailable
                return False, f"{self.module} not importable ({type(exc).__name__})"
        return True, "available"

    def make(self, problem: str, reference: Callable) -> Callable | None:
        factory = self.impls.get(problem)
        return factory(reference) if factory else None


# --------------------------------------------------------------------------------------------- compile
def _compile_fwd(ref: Callable) -> Callable:
    return torch.compile(ref, dynamic=False)


def _compile_with_helper(problem: str) -> Factory:
    helper, _ = FWD_HELPERS[problem]

    def make(ref: Callable) -> Callable:
        g = dict(ref.__globals__)
        g[helper] = torch.compile(g[helper], dynamic=False)
        return types.FunctionType(ref.__code__, g, ref.__name__, ref.__defaults__, ref.__closure__)

    return make


def _compile_rope(ref: Callable) -> Callable:
    rope = torch.compile(ref.__globals__["_rope"], dynamic=False)
    return _bwd_rope(lambda q, k, c, s: (rope(q, c, s), rope(k, c, s)))


COMPILE = Backend("compile", "torch.compile (default mode) of the reference's forward")
for _name in (
    "gemm_bf16",
    "o_proj_residual",
    "gate_up_swiglu",
    "rmsnorm",
    "add_rmsnorm",
    "layernorm",
    "swiglu",
    "geglu",
    "softmax",
    "rope",
    "attention_causal",
    "embedding",
):
    COMPILE.impls[_name] = _compile_fwd
for _name in FWD_HELPERS:
    COMPILE.impls[_name] = _compile_with_helper(_name)
COMPILE.impls["rope_bwd"] = _compile_rope
COMPILE.impls["cross_entropy"] = lambda ref: _bwd_ce(torch.compile(lambda z, t: F.cross_entropy(z.float(), t)))
COMPILE.impls["fused_linear_cross_entropy"] = lambda ref: _bwd_flce(
    torch.compile(lambda h, w, t: F.cross_entropy((h @ w.t()).float(), t))
)

# ----------------------------------------------------------------------------------------------- eager
EAGER = Backend("eager", "the PyTorch reference, eager")
for _name in list(COMPILE.impls):
    EAGER.impls[_name] = lambda ref: ref


# ---------------------------------------------------------------------------------------------- vendor
def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _rms_vendor(x, w):
    return F.rms_norm(x, x.shape[-1:], w, EPS)


VENDOR = Backend("vendor", "the library call a framework makes (cuBLAS addmm, F.rms_norm, SDPA, ...)")
VENDOR.impls.update(
    {
        "gemm_bf16": lambda ref: lambda x, w: F.linear(x, w),
        "o_proj_residual": lambda ref: lambda x, w, r: torch.addmm(r, x, w.t()),
        "rmsnorm": lambda ref: _rms_vendor,
        "rmsnorm_bwd": lambda ref: _bwd_rmsnorm(_rms_vendor),
        "add_rmsnorm": lambda ref: lambda x, r, w: (lambda s: (s, _rms_vendor(s, w)))(x + r),
        "layernorm": lambda ref: lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPS),
        "layernorm_bwd": lambda ref: _bwd_layernorm(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPS)),
        "softmax": lambda ref: lambda x: torch.softmax(x, dim=-1),
        "softmax_bwd": lambda ref: _bwd_softmax(lambda x: torch.softmax(x, dim=-1)),
        "attention_causal": lambda ref: _sdpa,
        "attention_causal_bwd": lambda ref: _bwd_attn(_sdpa),
        "cross_entropy": lambda ref: _bwd_ce(lambda z, t: F.cross_entropy(z, t).float()),  # bf16 math, fp32 loss
        "embedding": lambda ref: lambda ids, w: F.embedding(ids, w),
    }
)


# ----------------------------------------------------------------------------------------------- liger
def _liger(name: str):
    return importlib.import_module(f"liger_kernel.ops.{name}")


def _liger_rms(x, w):
    return _liger("rms_norm").LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)


def _liger_ln(x, w, b):
    return _liger("layer_norm").LigerLayerNormFunction.apply(x, w, b, EPS)


def _liger_rope(q, k, cos, sin):
    # Liger takes [batch, heads, seq, dim]; transposed views of the suite's [batch, seq, heads, dim].
    qo, ko = _liger("rope").LigerRopeFunction.apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return qo.transpose(1, 2), ko.transpose(1, 2)


def _liger_ce(z, t):
    # Liger returns the loss in the logits' dtype; the contract is fp32 (its accuracy is still judged).
    return _liger("cross_entropy").LigerCrossEntropyFunction.apply(z, t, None)[0].float()


def _liger_flce(h, w, t):
    return _liger("fused_linear_cross_entropy").LigerFusedLinearCrossEntropyFunction.apply(h, w, t)[0]


def _liger_add_rms(x, r, w):
    y, s = _liger("fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)
    return s, y


def _liger_swiglu(g, u):
    return _liger("swiglu").LigerSiLUMulFunction.apply(g, u)


def _liger_geglu(g, u):
    return _liger("geglu").LigerGELUMulFunction.apply(g, u)


def _liger_softmax(x):
    return _liger("softmax").LigerSoftmaxFunction.apply(x)


LIGER = Backend("liger", "Liger-Kernel's Triton kernels", requires_cuda=True, module="liger_kernel")
LIGER.impls.update(
    {
        "rmsnorm": lambda ref: _liger_rms,
        "rmsnorm_bwd": lambda ref: _bwd_rmsnorm(_liger_rms),
        "add_rmsnorm": lambda ref: _liger_add_rms,
        "layernorm": lambda ref: _liger_ln,
        "layernorm_bwd": lambda ref: _bwd_layernorm(_liger_ln),
        "swiglu": lambda ref: _liger_swiglu,
        "swiglu_bwd": lambda ref: _bwd_gate(_liger_swiglu),
        "geglu": lambda ref: _liger_geglu,
        "softmax": lambda ref: _liger_softmax,
        "softmax_bwd": lambda ref: _bwd_softmax(_liger_softmax),
        "rope": lambda ref: _liger_rope,
        "rope_bwd": lambda ref: _bwd_rope(_liger_rope),
        "cross_entropy": lambda ref: _bwd_ce(_liger_ce),
        "fused_linear_cross_entropy": lambda ref: _bwd_flce(_liger_flce),
    }
)


# ---------------------------------------------------------------------------------------------- solkit
def _k():
    # Imported on first use: the kernels pull in Triton, which the other backends do not need.
    import solkit.kernels

    return solkit.kernels


def _sk_rms(x, w):
    return _k().rmsnorm(x, w, eps=EPS)


def _sk_ln(x, w, b):
    return _k().layernorm(x, w, b, eps=EPS)


def _sk_rope(q, k, cos, sin):
    return _k().apply_rope(q, k, cos, sin, layout="bshd")


def _sk_ce(z, t):
    return _k().cross_entropy(z, t)


def _sk_flce(h, w, t):
    return _k().fused_linear_cross_entropy(h, w, t)


def _sk_gate_up_swiglu(x, w):
    # One GEMM for gate and up, then the fused gate kernel (the GEMM epilogue cannot pair columns).
    gu = _k().gemm(x, w)
    g, u = gu.chunk(2, dim=-1)
    return _k().swiglu(g, u)


SOLKIT = Backend("solkit", "solkit's Triton kernels", requires_cuda=True, module="triton")
SOLKIT.impls.update(
    {
        "gemm_bf16": lambda ref: lambda x, w: _k().gemm(x, w),
        "o_proj_residual": lambda ref: lambda x, w, r: _k().gemm(x, w, residual=r),
        "gate_up_swiglu": lambda ref: _sk_gate_up_swiglu,
        "rmsnorm": lambda ref: _sk_rms,
        "rmsnorm_bwd": lambda ref: _bwd_rmsnorm(_sk_rms),
        "add_rmsnorm": lambda ref: lambda x, r, w: _k().add_rmsnorm(x, r, w, eps=EPS),
        "layernorm": lambda ref: _sk_ln,
        "layernorm_bwd": lambda ref: _bwd_layernorm(_sk_ln),
        "swiglu": lambda ref: lambda g, u: _k().swiglu(g, u),
        "swiglu_bwd": lambda ref: _bwd_gate(lambda g, u: _k().swiglu(g, u)),
        "geglu": lambda ref: lambda g, u: _k().geglu(g, u),
        "softmax": lambda ref: lambda x: _k().softmax(x),
        "softmax_bwd": lambda ref: _bwd_softmax(lambda x: _k().softmax(x)),
        "rope": lambda ref: _sk_rope,
        "rope_bwd": lambda ref: _bwd_rope(_sk_rope),
        "cross_entropy": lambda ref: _bwd_ce(_sk_ce),
        "fused_linear_cross_entropy": lambda ref: _bwd_flce(_sk_flce),
    }
)

BACKENDS: dict[str, Backend] = {b.name: b for b in (EAGER, COMPILE, VENDOR, LIGER, SOLKIT)}
#: Backends whose kernels overwrite an input buffer on purpose (the gradient of the logits is written
#: into the logits, as the fastest cross-entropy kernels do). The bench gives them private copies.
MUTATES_INPUTS = {("solkit", "cross_entropy"), ("liger", "cross_entropy")}
# Liger's RoPE rotates q/k in place (forward) and dq/dk in place (backward), and its SwiGLU backward
# writes dgate/dup into the saved gate/up, which share storage with the pool through detach(): timed
# on the shared pool, they rewrite the inputs every later backend is checked on (the cause of solkit's
# "incorrect" rope, rope_bwd and swiglu_bwd rows in round 2; solkit's kernels allocate their outputs).
MUTATES_INPUTS |= {("liger", "rope"), ("liger", "rope_bwd"), ("liger", "swiglu_bwd")}
