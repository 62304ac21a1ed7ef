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
  interpreter, whose timings mean nothing);
* ``sdpa_flash``, ``sdpa_cudnn``, ``sdpa_efficient``: SDPA with that one backend forced (:mod:`.sdpa`);
* ``cudnn`` (cuDNN frontend graphs, :mod:`.cudnn_attention`), ``flashinfer`` and ``quack`` (:mod:`.rivals`): the
  strongest public kernels, when installed (else ``unavailable`` with the reason).

The backward rows (``rmsnorm_bwd``, ``layernorm_bwd``, ``softmax_bwd``, ``swiglu_bwd``, mode ``bwd``) time the
backward call alone on the saved tensors of the backend's own forward (:mod:`.backward_only`).

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

from solkit.backends import cudnn_attention, liger, rivals
from solkit.backends.autograd import FWD_HELPERS, bwd_attn, bwd_ce, bwd_embedding, bwd_flce, bwd_rope
from solkit.backends.backward_only import BACKWARD_ROWS, backward_only
from solkit.backends.liger import EPS
from solkit.backends.sdpa import FORCED, forced

Factory = Callable[[Callable], Callable]


@dataclass
class Backend:
    name: str
    description: str
    impls: dict[str, Factory] = field(default_factory=dict)
    requires_cuda: bool = False
    module: str | None = None  # import needed for availability
    probe: Callable[[], str | None] | None = None  # None when it can run, else the one-line reason it cannot

    def available(self, device: str) -> tuple[bool, str]:
        if self.requires_cuda and not device.startswith("cuda"):
            return False, "needs a CUDA device (Triton's CPU interpreter is not a benchmark)"
        if self.module:
            try:
                importlib.import_module(self.module)
            except Exception as exc:  # noqa: BLE001 - any import failure means unavailable
                return False, f"{self.module} not importable ({type(exc).__name__})"
        why = self.probe() if self.probe else None
        return (False, why) if why else (True, "available")

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


def _compile_backward(helper: str, n_inputs: int) -> Factory:
    return lambda ref: backward_only(torch.compile(ref.__globals__[helper], dynamic=False), n_inputs)


def _compile_rope(ref: Callable) -> Callable:
    rope = torch.compile(ref.__globals__["_rope"], dynamic=False)
    return bwd_rope(lambda q, k, c, s: (rope(q, c, s), rope(k, c, s)))


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
COMPILE.impls["embedding_bwd"] = lambda ref: bwd_embedding(torch.compile(F.embedding, dynamic=False))
COMPILE.impls["cross_entropy"] = lambda ref: bwd_ce(torch.compile(lambda z, t: F.cross_entropy(z.float(), t)))
COMPILE.impls["fused_linear_cross_entropy"] = lambda ref: bwd_flce(
    torch.compile(lambda h, w, t: F.cross_entropy((h @ w.t()).float(), t))
)

# ----------------------------------------------------------------------------------------------- eager
EAGER = Backend("eager", "the PyTorch reference, eager")
for _name in list(COMPILE.impls):
    EAGER.impls[_name] = lambda ref: ref
for _name, (_helper, _n) in BACKWARD_ROWS.items():  # the backward call alone on the reference's saved tensors
    EAGER.impls[_name] = lambda ref, h=_helper, n=_n: backward_only(ref.__globals__[h], n)
    COMPILE.impls[_name] = _compile_backward(_helper, _n)


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
        "rmsnorm_bwd": lambda ref: backward_only(_rms_vendor, 2),
        "add_rmsnorm": lambda ref: lambda x, r, w: (lambda s: (s, _rms_vendor(s, w)))(x + r),
        "layernorm": lambda ref: lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPS),
        "layernorm_bwd": lambda ref: backward_only(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPS), 3),
        "softmax": lambda ref: lambda x: torch.softmax(x, dim=-1),
        "softmax_bwd": lambda ref: backward_only(lambda x: torch.softmax(x, dim=-1), 1),
        "attention_causal": lambda ref: _sdpa,
        "attention_causal_bwd": lambda ref: bwd_attn(_sdpa),
        "cross_entropy": lambda ref: bwd_ce(lambda z, t: F.cross_entropy(z, t).float()),  # bf16 math, fp32 loss
        "embedding": lambda ref: lambda ids, w: F.embedding(ids, w),
        "embedding_bwd": lambda ref: bwd_embedding(F.embedding),
    }
)


# ----------------------------------------------------------------------------------------------- liger
LIGER = Backend("liger", "Liger-Kernel's Triton kernels", requires_cuda=True, module="liger_kernel")
LIGER.impls.update(
    {
        "rmsnorm": lambda ref: liger.rms_norm,
        "rmsnorm_bwd": lambda ref: backward_only(liger.rms_norm, 2),
        "add_rmsnorm": lambda ref: liger.add_rms_norm,
        "layernorm": lambda ref: liger.layer_norm,
        "layernorm_bwd": lambda ref: backward_only(liger.layer_norm, 3),
        "swiglu": lambda ref: liger.swiglu,
        "swiglu_bwd": lambda ref: backward_only(liger.swiglu, 2),
        "geglu": lambda ref: liger.geglu,
        "softmax": lambda ref: liger.softmax,
        "softmax_bwd": lambda ref: backward_only(liger.softmax, 1),
        "rope": lambda ref: liger.rope,
        "rope_bwd": lambda ref: bwd_rope(liger.rope),
        "cross_entropy": lambda ref: bwd_ce(liger.cross_entropy),
        "fused_linear_cross_entropy": lambda ref: bwd_flce(liger.fused_linear_cross_entropy),
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


def _sk_attn(q, k, v):
    # The suite's (B, H, S, D) layout is the kernel's own: no transpose.
    return _k().attention(q, k, v, causal=True)


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
        "rmsnorm_bwd": lambda ref: backward_only(_sk_rms, 2),
        "add_rmsnorm": lambda ref: lambda x, r, w: _k().add_rmsnorm(x, r, w, eps=EPS),
        "layernorm": lambda ref: _sk_ln,
        "layernorm_bwd": lambda ref: backward_only(_sk_ln, 3),
        "swiglu": lambda ref: lambda g, u: _k().swiglu(g, u),
        "swiglu_bwd": lambda ref: backward_only(lambda g, u: _k().swiglu(g, u), 2),
        "geglu": lambda ref: lambda g, u: _k().geglu(g, u),
        "softmax": lambda ref: lambda x: _k().softmax(x),
        "softmax_bwd": lambda ref: backward_only(lambda x: _k().softmax(x), 1),
        "rope": lambda ref: _sk_rope,
        "rope_bwd": lambda ref: bwd_rope(_sk_rope),
        "cross_entropy": lambda ref: bwd_ce(_sk_ce),
        "fused_linear_cross_entropy": lambda ref: bwd_flce(_sk_flce),
        "embedding": lambda ref: lambda ids, w: _k().embedding(ids, w),
        "embedding_bwd": lambda ref: bwd_embedding(lambda ids, w: _k().embedding(ids, w)),
        "attention_causal": lambda ref: _sk_attn,
        "attention_causal_bwd": lambda ref: bwd_attn(_sk_attn),
    }
)


# ---------------------------------------------------------------------------------------------- rivals
def _sdpa_backend(name: str) -> Backend:
    attn = forced(name)
    what = f"F.scaled_dot_product_attention, enable_gqa=True, {FORCED[name].name} forced"
    b = Backend(name, what, requires_cuda=True)
    b.impls.update({"attention_causal": lambda ref: attn, "attention_causal_bwd": lambda ref: bwd_attn(attn)})
    return b


CUDNN = Backend("cudnn", "cuDNN fused attention through nvidia-cudnn-frontend's graph API", requires_cuda=True,
                probe=cudnn_attention.probe)  # fmt: skip
CUDNN.impls.update(
    {
        "attention_causal": lambda ref: cudnn_attention.causal_attention,
        "attention_causal_bwd": lambda ref: bwd_attn(cudnn_attention.causal_attention),
    }
)
FLASHINFER = Backend("flashinfer", "FlashInfer's prefill attention (forward only)", requires_cuda=True,
                     probe=lambda: rivals.probe("flashinfer"))  # fmt: skip
FLASHINFER.impls["attention_causal"] = lambda ref: rivals.flashinfer_causal
QUACK = Backend("quack", "quack-kernels (CuTe DSL): norms, softmax, cross-entropy", requires_cuda=True,
                probe=lambda: rivals.probe("quack"))  # fmt: skip
QUACK.impls.update(
    {
        "rmsnorm": lambda ref: rivals.quack_rmsnorm,
        "rmsnorm_bwd": lambda ref: backward_only(rivals.quack_rmsnorm, 2),
        "layernorm": lambda ref: rivals.quack_layernorm,
        "layernorm_bwd": lambda ref: backward_only(rivals.quack_layernorm, 3),
        "softmax": lambda ref: rivals.quack_softmax,
        "softmax_bwd": lambda ref: backward_only(rivals.quack_softmax, 1),
        "cross_entropy": lambda ref: bwd_ce(rivals.quack_cross_entropy),
    }
)

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (EAGER, COMPILE, VENDOR, LIGER, SOLKIT, *(_sdpa_backend(n) for n in FORCED), CUDNN, FLASHINFER, QUACK)
}
#: Backends whose kernels overwrite an input buffer on purpose (the gradient of the logits is written
#: into the logits, as the fastest cross-entropy kernels do). The bench gives them private copies.
MUTATES_INPUTS = {("solkit", "cross_entropy"), ("liger", "cross_entropy")}
# Liger's RoPE rotates q/k in place (forward) and dq/dk in place (backward), and its SwiGLU backward
# writes dgate/dup into the saved gate/up, which share storage with the pool through detach(): timed
# on the shared pool, they rewrite the inputs every later backend is checked on (which made solkit's
# rope, rope_bwd and swiglu_bwd rows read "incorrect" before; solkit's kernels allocate their outputs).
MUTATES_INPUTS |= {("liger", "rope"), ("liger", "rope_bwd"), ("liger", "swiglu_bwd")}
