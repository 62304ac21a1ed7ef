"""The forwards ``solkit.patch`` binds to one model instance's modules, each calling solkit's kernels.

Each is a plain function ``forward(self, ...)`` bound with :class:`types.MethodType` to one module, so
the module, its parameters (names, objects, initial values), its hooks and its class stay what they
were; :func:`solkit.swap.unpatch` deletes the instance attribute again. What each forward does is set
by a small frozen plan stored on the module (``_solkit_plan``), so one function serves every family.

The attention, MLP and decoder-layer forwards follow transformers' code for those families op for op
(the family differences are in :class:`~solkit.swap.families.Family`); the probe in
:mod:`solkit.swap.probe` checks each against the module's own forward before it is applied.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import sdpa_kernel

from solkit.kernels import apply_rope, fused_linear, fused_linear_cross_entropy, geglu, rmsnorm, swiglu
from solkit.swap.families import Family
from solkit.swap.gated import gated_linear
from solkit.swap.settings import loss_chunk_tokens

PLAN = "_solkit_plan"


@dataclass(frozen=True)
class NormPlan:
    eps: float
    gemma: bool


@dataclass(frozen=True)
class AttentionPlan:
    family: Family
    rope: bool  # solkit's RoPE kernel instead of transformers' apply_rotary_pos_emb
    hf_rope: Any = field(compare=False)  # the family's apply_rotary_pos_emb, read from its module
    eager_attention: Any = field(compare=False)  # the family's eager_attention_forward (the default interface)
    interfaces: Any = field(compare=False)  # transformers' ALL_ATTENTION_FUNCTIONS (read at patch time)
    # SDPA backends asked for, first choice first (torch.nn.attention.SDPBackend), scoped to this forward's
    # attention call when the model's attention is "sdpa"; empty: PyTorch's own choice
    sdpa_backends: tuple[Any, ...] = ()


@dataclass(frozen=True)
class MLPPlan:
    gate: str | None  # "silu" (SwiGLU kernel), "gelu_tanh" (GeGLU kernel) or None (act_fn(gate) * up)
    # with a gate kernel and a plain nn.Linear down_proj: gate + down_proj as one op that keeps only gate and up
    # for the backward (solkit.swap.gated)
    fused_down: bool = False


@dataclass(frozen=True)
class CausalLMPlan:
    softcap: bool  # apply config.final_logit_softcapping inside the fused loss


def rmsnorm_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    plan: NormPlan = getattr(self, PLAN)
    if plan.gemma:  # (1 + w) * xhat, fp32 throughout, one rounding at the end
        return rmsnorm(x, self.weight, plan.eps, 1.0, "gemma")
    return rmsnorm(x, self.weight, plan.eps, 0.0, "llama")


def sdpa_scope(plan: AttentionPlan, implementation: str | None) -> contextlib.AbstractContextManager[Any]:
    """SDPA's backends in the plan's order for the span of one attention call (Dynamo traces the context
    manager; the backend chosen in the forward also runs the backward), else nothing."""
    if plan.sdpa_backends and implementation == "sdpa":
        return sdpa_kernel(list(plan.sdpa_backends), set_priority=True)
    return contextlib.nullcontext()


def attention_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    attention_mask: torch.Tensor | None = None,
    cache: Any = None,
    residual: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' attention forward; with ``residual``, o_proj adds it in the GEMM epilogue."""
    plan: AttentionPlan = getattr(self, PLAN)
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    q = self.q_proj(hidden_states).view(hidden_shape)
    k = self.k_proj(hidden_states).view(hidden_shape)
    v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    if plan.family.qk_norm:  # per-head RMSNorm over head_dim: the same before or after the transpose
        q, k = self.q_norm(q), self.k_norm(k)
    cos, sin = position_embeddings
    if plan.rope:  # one launch for q and k, in the projection's [batch, seq, heads, dim] layout
        q, k = apply_rope(q, k, cos, sin, layout="bshd")
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    else:
        q, k = plan.hf_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
    interface = plan.interfaces.get_interface(self.config._attn_implementation, plan.eager_attention)
    with sdpa_scope(plan, self.config._attn_implementation):
        out, weights = interface(
            self, q, k, v, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **plan.family.attention_kwargs(self),
            **kwargs,
        )  # fmt: skip
    out = out.reshape(*input_shape, -1).contiguous()
    if residual is not None:
        return fused_linear(out, self.o_proj.weight, self.o_proj.bias, residual), weights
    return self.o_proj(out), weights


def mlp_forward(self: nn.Module, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """Gated MLP; the gate through solkit's SwiGLU/GeGLU kernel, down_proj + residual fused when given."""
    plan: MLPPlan = getattr(self, PLAN)
    gate, up = self.gate_proj(x), self.up_proj(x)
    if plan.gate is not None and plan.fused_down:
        return gated_linear(gate, up, self.down_proj.weight, self.down_proj.bias, residual, plan.gate)
    if plan.gate == "silu":
        h = swiglu(gate, up)
    elif plan.gate == "gelu_tanh":
        h = geglu(gate, up)
    else:
        h = self.act_fn(gate) * up
    if residual is not None:
        return fused_linear(h, self.down_proj.weight, self.down_proj.bias, residual)
    return self.down_proj(h)


def decoder_layer_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Any = None,
    use_cache: bool | None = False,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """Pre-norm decoder layer (Llama, Mistral, Qwen) whose two residual adds ride in o_proj / down_proj."""
    residual = hidden_states
    h = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(
        hidden_states=h, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
        use_cache=use_cache, position_embeddings=position_embeddings, residual=residual, **kwargs,
    )  # fmt: skip
    h = self.post_attention_layernorm(hidden_states)
    return self.mlp(h, residual=hidden_states)


def causal_lm_forward(
    self: nn.Module,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Any = None,
    inputs_embeds: torch.Tensor | None = None,
    labels: torch.LongTensor | None = None,
    use_cache: bool | None = None,
    logits_to_keep: int | torch.Tensor = 0,
    **kwargs: Any,
) -> Any:
    """With labels: the loss from the fused linear cross-entropy, logits never built (``logits`` is None).

    Without labels (generation, evaluation of logits) or with ``logits_to_keep``, the class's own
    forward runs unchanged.
    """
    if labels is None or not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
        return type(self).forward(
            self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
            inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs,
        )  # fmt: skip
    from transformers.modeling_outputs import CausalLMOutputWithPast

    outputs = self.model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
        inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs,
    )  # fmt: skip
    loss = head_loss(self, outputs.last_hidden_state, labels, **kwargs)
    return CausalLMOutputWithPast(
        loss=loss, logits=None, cache=outputs.cache, hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
    )  # fmt: skip


def head_loss(
    self: nn.Module,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **_: Any,
) -> torch.Tensor:
    """transformers' ForCausalLMLoss (shift, ignore_index, mean or sum / num_items) on lm_head(hidden)."""
    plan: CausalLMPlan = getattr(self, PLAN)
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    head = self.lm_head
    softcap = self.config.final_logit_softcapping if plan.softcap else None
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = fused_linear_cross_entropy(
        hidden.reshape(-1, hidden.shape[-1]), head.weight, shift_labels.reshape(-1).to(hidden.device), head.bias,
        ignore_index=ignore_index, softcap=softcap, reduction=reduction,
        chunk_tokens=loss_chunk_tokens(head.weight.shape[0], head.weight.element_size()),
    )  # fmt: skip
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss
