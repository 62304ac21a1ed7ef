"""The Hugging Face model families ``solkit.patch`` knows, and where their swappable modules are.

A family names its transformers module and class prefix; the classes are read from that module
(never assigned to), so ``patch`` finds the RMSNorms, attentions, MLPs, decoder layers and the causal
LM head of one model instance by type. What differs between families and matters to a swap:

* the RMSNorm form: ``w * cast(xhat)`` (Llama, Mistral, Qwen) or Gemma's ``(1 + w) * xhat`` in fp32;
* the gated MLP activation: SiLU (SwiGLU) or tanh-approximated GELU (Gemma's GeGLU);
* sandwich norms (Gemma 2/3): the attention and MLP outputs are normalised *before* the residual add,
  so no GEMM produces ``x @ W.T + residual`` there and the residual swap does not apply;
* per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3);
* what the attention passes to the attention function: a sliding window (from the config for
  Mistral, from the layer for Qwen and Gemma) and Gemma 2's attention-logit softcap;
* Gemma 2's final logit softcap, which the fused linear cross-entropy applies in its epilogue.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from torch import nn

from solkit.errors import SolkitError


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    module: str  # transformers modeling module, e.g. transformers.models.llama.modeling_llama
    prefix: str  # class-name prefix, e.g. "Llama"
    gemma_norm: bool = False
    activation: str = "silu"  # what the gated MLP's act_fn must be for the GLU kernel: silu or gelu_tanh
    sandwich: bool = False
    qk_norm: bool = False
    sliding_window: str | None = None  # "config" | "layer" | None: the attention call's sliding_window
    attn_softcap: bool = False
    final_softcap: bool = False

    def classes(self) -> dict[str, type[nn.Module]]:
        mod = self.hf_module()
        names = {
            "norm": "RMSNorm",
            "attention": "Attention",
            "mlp": "MLP",
            "layer": "DecoderLayer",
            "causal_lm": "ForCausalLM",
        }
        return {k: getattr(mod, self.prefix + v) for k, v in names.items() if hasattr(mod, self.prefix + v)}

    def hf_module(self) -> ModuleType:
        try:
            return importlib.import_module(self.module)
        except ImportError as exc:
            raise SolkitError(f"solkit.patch needs transformers with {self.module}: {exc}") from None

    def attention_kwargs(self, attn: nn.Module) -> dict[str, Any]:
        """The family-specific keyword arguments its attention passes to the attention function."""
        kw: dict[str, Any] = {}
        if self.sliding_window == "config":
            kw["sliding_window"] = getattr(attn.config, "sliding_window", None)
        elif self.sliding_window == "layer":
            kw["sliding_window"] = attn.sliding_window
        if self.attn_softcap:
            kw["softcap"] = attn.attn_logit_softcapping
        return kw


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("llama", ("llama",), "transformers.models.llama.modeling_llama", "Llama"),
        Family("mistral", ("mistral",), "transformers.models.mistral.modeling_mistral", "Mistral",
               sliding_window="config"),
        Family("qwen2", ("qwen2",), "transformers.models.qwen2.modeling_qwen2", "Qwen2", sliding_window="layer"),
        Family("qwen3", ("qwen3",), "transformers.models.qwen3.modeling_qwen3", "Qwen3", qk_norm=True,
               sliding_window="layer"),
        Family("gemma2", ("gemma2",), "transformers.models.gemma2.modeling_gemma2", "Gemma2", gemma_norm=True,
               activation="gelu_tanh", sandwich=True, sliding_window="layer", attn_softcap=True,
               final_softcap=True),
        Family("gemma3", ("gemma3_text", "gemma3"), "transformers.models.gemma3.modeling_gemma3", "Gemma3",
               gemma_norm=True, activation="gelu_tanh", sandwich=True, qk_norm=True, sliding_window="layer",
               final_softcap=True),
    )
}  # fmt: skip

SUPPORTED = tuple(FAMILIES)


def supported_text() -> str:
    return ", ".join(f"{f.name} ({'/'.join(f.model_types)})" for f in FAMILIES.values())


def family_of(model: nn.Module) -> Family:
    """The family of a transformers model instance, or one SolkitError listing the supported ones."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    for family in FAMILIES.values():
        if model_type in family.model_types:
            return family
    what = f"model type {model_type!r} ({type(model).__name__})" if model_type else f"{type(model).__name__}"
    raise SolkitError(
        f"solkit.patch: {what} is not supported; supported model types: {supported_text()}"
        + ("" if model_type else " (a Hugging Face transformers model with a config)")
    )


def activation_of(mlp: nn.Module) -> str | None:
    """``silu`` or ``gelu_tanh`` when the MLP's act_fn is one the gate kernels compute, else None."""
    act = getattr(mlp, "act_fn", None)
    name = type(act).__name__
    if isinstance(act, nn.SiLU) or name == "SiLUActivation":
        return "silu"
    if name in ("PytorchGELUTanh", "GELUTanh") or (
        isinstance(act, nn.GELU) and getattr(act, "approximate", "none") == "tanh"
    ):
        return "gelu_tanh"
    return None
