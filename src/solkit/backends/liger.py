"""Liger-Kernel's Triton kernels as plain functions: the one home of the Liger calls that ``solkit bench``
and ``solkit train`` compare against. ``liger_kernel`` is imported on first use (it is optional).

Every function takes the suite's layouts: RoPE q/k are ``[batch, seq, heads, dim]``; RMSNorm is the
Llama variant (offset 0, fp32 compute) and never in place (the in-place backward overwrites dY,
which is unsafe when dY is shared).
"""

from __future__ import annotations

import importlib

EPS = 1e-5  # every norm in the suite uses eps = 1e-5


def _ops(name: str):
    return importlib.import_module(f"liger_kernel.ops.{name}")


def rms_norm(x, w, eps: float = EPS):
    return _ops("rms_norm").LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)


def layer_norm(x, w, b):
    return _ops("layer_norm").LigerLayerNormFunction.apply(x, w, b, EPS)


def rope(q, k, cos, sin):
    # Liger takes [batch, heads, seq, dim]; transposed views of the suite's [batch, seq, heads, dim].
    qo, ko = _ops("rope").LigerRopeFunction.apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return qo.transpose(1, 2), ko.transpose(1, 2)


def cross_entropy(z, t):
    # Liger returns the loss in the logits' dtype; the contract is fp32 (its accuracy is still judged).
    return _ops("cross_entropy").LigerCrossEntropyFunction.apply(z, t, None)[0].float()


def fused_linear_cross_entropy(h, w, t):
    return _ops("fused_linear_cross_entropy").LigerFusedLinearCrossEntropyFunction.apply(h, w, t)[0]


def add_rms_norm(x, r, w):
    y, s = _ops("fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)
    return s, y


def swiglu(g, u):
    return _ops("swiglu").LigerSiLUMulFunction.apply(g, u)


def geglu(g, u):
    return _ops("geglu").LigerGELUMulFunction.apply(g, u)


def softmax(x):
    return _ops("softmax").LigerSoftmaxFunction.apply(x)


# Model family -> Liger-Kernel's patch function for that Hugging Face model (liger_kernel.transformers).
HF_APPLY = {
    "llama": "apply_liger_kernel_to_llama",
    "mistral": "apply_liger_kernel_to_mistral",
    "qwen2": "apply_liger_kernel_to_qwen2",
    "qwen3": "apply_liger_kernel_to_qwen3",
    "gemma2": "apply_liger_kernel_to_gemma2",
    "gemma3": "apply_liger_kernel_to_gemma3_text",
}


def apply_to_hf(model, family: str) -> str:
    """Liger's ``apply_liger_kernel_to_<family>(model=model)`` with its defaults (RoPE, RMSNorm, SwiGLU/GeGLU,
    fused linear cross-entropy); returns the function's name. Liger also rebinds functions and classes of
    transformers' modeling module, process-wide: run it in a process of its own."""
    name = HF_APPLY.get(family)
    if name is None:
        raise LookupError(f"Liger-Kernel has no apply function for {family}; it has: {', '.join(HF_APPLY)}")
    getattr(importlib.import_module("liger_kernel.transformers"), name)(model=model)
    return name
