"""Training FLOPs per token of a Llama-style decoder, and MFU/HFU, under two labelled conventions.

Symbols: L layers, H query heads, Q head dim, T sequence length, h hidden, f SwiGLU width, V vocab.

* ``palm`` (PaLM App. B, torchtitan, nanoGPT): ``6·N + 12·L·H·Q·T`` per token, where N counts every
  parameter except the input embedding when it is untied (torchtitan's ``nparams_for_matmul``; a tied
  embedding doubles as the LM head, so it stays). Attention scores are counted in full: no causal
  discount. Norm weights are inside N although they do no matmul (a < 0.01 % effect at real sizes).
* ``megatron`` (Megatron-LM ``num_floating_point_operations``): ``6·N_gemm + 6·L·H·Q·T``, where N_gemm
  counts only weights used in GEMMs (projections, MLP, LM head) and the attention core is halved for
  the causal mask.

6 = 3 passes (forward, data gradient, weight gradient) × 2 FLOPs per multiply-add. Model FLOPs never
include recomputation; hardware FLOPs (HFU) add the forward recompute of activation checkpointing.
Flash-attention's own backward recompute of the scores is not counted in either (torchtitan's
convention). MFU = tokens/s per GPU × FLOPs per token ÷ peak FLOP/s of one GPU.
"""

from __future__ import annotations

from typing import Literal

from solkit.errors import SolkitError
from solkit.train.config import ModelConfig

Convention = Literal["palm", "megatron"]
CONVENTIONS: dict[str, str] = {
    "palm": "PaLM/torchtitan: 6N + 12·L·H·Q·T (no causal discount, N excludes untied input embedding)",
    "megatron": "Megatron causal-halved: 6·N_gemm + 6·L·H·Q·T (GEMM weights only, causal attention ÷ 2)",
}


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts by role; ``gemm`` counts the weights that take part in matrix products."""
    h, q = cfg.hidden, cfg.head_dim
    attn = h * cfg.heads * q * 2 + h * cfg.kv_heads * q * 2  # q_proj + o_proj, k_proj + v_proj
    mlp = 3 * h * cfg.intermediate  # gate, up, down
    layer_gemm = attn + mlp
    layer_norms = 2 * h
    embedding = cfg.vocab * h
    head = 0 if cfg.tie_embeddings else cfg.vocab * h
    layers = cfg.layers * (layer_gemm + layer_norms)
    total = embedding + layers + h + head
    return {
        "embedding": embedding,
        "layer_gemm": layer_gemm,
        "layer_norms": layer_norms,
        "layers": layers,
        "final_norm": h,
        "lm_head": head,
        "total": total,
        # The LM head GEMM runs against V·h weights whether or not they are tied to the embedding.
        "gemm": cfg.layers * layer_gemm + cfg.vocab * h,
        "palm_n": total if cfg.tie_embeddings else total - embedding,
    }


def attention_flops_per_token(cfg: ModelConfig, seq: int, convention: Convention = "palm") -> float:
    """Training FLOPs per token of the attention core (QKᵀ and PV, forward and backward)."""
    full = 12.0 * cfg.layers * cfg.heads * cfg.head_dim * seq
    return full if convention == "palm" else full / 2


def flops_per_token(cfg: ModelConfig, seq: int | None = None, convention: Convention = "palm") -> float:
    """Model (not hardware) training FLOPs per token at sequence length ``seq``."""
    if convention not in CONVENTIONS:
        raise SolkitError(f"unknown FLOP convention {convention!r}; allowed: {', '.join(CONVENTIONS)}")
    seq = seq or cfg.seq
    counts = param_counts(cfg)
    n = counts["palm_n"] if convention == "palm" else counts["gemm"]
    return 6.0 * n + attention_flops_per_token(cfg, seq, convention)


def recompute_flops_per_token(cfg: ModelConfig, seq: int | None = None, convention: Convention = "palm") -> float:
    """Extra forward FLOPs per token of full activation checkpointing of every decoder layer."""
    seq = seq or cfg.seq
    forward_gemm = 2.0 * cfg.layers * param_counts(cfg)["layer_gemm"]
    return forward_gemm + attention_flops_per_token(cfg, seq, convention) / 3


def mfu(tokens_per_s_per_gpu: float, flops_per_tok: float, peak_flops: float) -> float:
    """Model FLOPs utilisation as a fraction (not percent)."""
    if peak_flops <= 0:
        raise SolkitError("peak FLOP/s must be positive")
    return tokens_per_s_per_gpu * flops_per_tok / peak_flops


def utilisation(
    cfg: ModelConfig,
    seq: int,
    tokens_per_s_per_gpu: float,
    peaks: dict[str, float],
    recompute: bool = False,
) -> dict[str, dict[str, float | str | None]]:
    """MFU (and HFU with recompute) for both conventions against each labelled peak basis."""
    out: dict[str, dict[str, float | str | None]] = {}
    for conv in CONVENTIONS:
        f_tok = flops_per_token(cfg, seq, conv)  # type: ignore[arg-type]
        hw_tok = f_tok + (recompute_flops_per_token(cfg, seq, conv) if recompute else 0.0)  # type: ignore[arg-type]
        entry: dict[str, float | str | None] = {
            "label": CONVENTIONS[conv],
            "flops_per_token": f_tok,
            "achieved_tflops": tokens_per_s_per_gpu * f_tok / 1e12,
        }
        for basis, peak in peaks.items():
            entry[f"mfu_{basis}"] = mfu(tokens_per_s_per_gpu, f_tok, peak) if peak else None
            entry[f"hfu_{basis}"] = mfu(tokens_per_s_per_gpu, hw_tok, peak) if (peak and recompute) else None
        out[conv] = entry
    return out
