"""A Llama-style decoder built for kernel swaps, with random weights and synthetic tokens.

Every operator a fused kernel can replace is its own small module with a plain-PyTorch default, so
a variant swaps a module and leaves the model code alone:

* :class:`RMSNorm` (Llama casting: normalise in fp32, cast back, then scale by the weight);
* :class:`Rotary`: half-split RoPE on q and k in ``(batch, seq, heads, head_dim)`` layout;
* :class:`SiluMul`: the SwiGLU gate ``silu(gate) * up``;
* :class:`LinearResidual`: ``x @ Wᵀ + residual``, used for o_proj and down_proj so the residual add
  can move into a GEMM epilogue (the decoder layer calls ``o_proj(attn, residual=h)``);
* :class:`LMHeadLoss`: LM head GEMM + cross-entropy (fp32 logits, as Hugging Face does), so a fused
  linear cross-entropy can replace both without materialising the logits.

Attention goes through ``F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from solkit.train.config import ModelConfig


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class Rotary(nn.Module):
    """RoPE, half-split layout. q: (B, T, H, D), k: (B, T, KV, D); cos, sin: (T, D) in fp32 (HF tables)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Hugging Face's apply_rotary_pos_emb, op for op: x * cos + rotate_half(x) * sin in x's dtype.
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype)[:, None, :] + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)[:, None, :]


class SiluMul(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


class LinearResidual(nn.Module):
    """``y = x @ weight.T (+ residual)``; weight is (out_features, in_features) like nn.Linear."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        y = F.linear(x, self.weight)
        return y if residual is None else residual + y


class LMHeadLoss(nn.Module):
    """Mean next-token cross-entropy of ``h @ weight.T`` against ``labels``; logits upcast to fp32."""

    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = F.linear(h, self.weight).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


class Attention(nn.Module):
    # enable_gqa=True lets SDPA's flash kernel read the shared k/v heads directly; set False (see
    # set_gqa_native) where no fused SDPA backend supports it, so attention never falls back to math.
    gqa_native = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = LinearResidual(cfg.heads * cfg.head_dim, cfg.hidden)
        self.rope = Rotary()

    def forward(self, x: torch.Tensor, residual: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        q, k = self.rope(q, k, cos, sin)
        if not self.gqa_native and self.kv_heads != self.heads:  # repeat k/v heads for SDPA (HF's repeat_kv)
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=2)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=2)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=self.gqa_native
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1), residual=residual)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.act = SiluMul()
        self.down_proj = LinearResidual(cfg.intermediate, cfg.hidden)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x), self.up_proj(x)), residual=residual)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = LlamaRMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = LlamaRMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = self.attn(self.attn_norm(h), h, cos, sin)
        return self.mlp(self.mlp_norm(h), h)


class LlamaModel(nn.Module):
    """Decoder-only LM whose ``forward(input_ids, labels)`` returns the mean cross-entropy loss."""

    def __init__(self, cfg: ModelConfig, checkpoint_layers: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.checkpoint_layers = checkpoint_layers
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = LlamaRMSNorm(cfg.hidden, cfg.norm_eps)
        head_weight = self.embed.weight if cfg.tie_embeddings else nn.Parameter(torch.empty(cfg.vocab, cfg.hidden))
        self.head = LMHeadLoss(head_weight)
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)

    def reset_rope(self, seq: int) -> None:
        """(Re)build the fp32 cos/sin tables, (seq, head_dim) with the half repeated as HF does."""
        half = self.cfg.head_dim // 2
        device = self.embed.weight.device
        inv_freq = 1.0 / (self.cfg.rope_theta ** (torch.arange(half, device=device, dtype=torch.float64) / half))
        angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float64), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.rope_cos = angles.cos().float()
        self.rope_sin = angles.sin().float()

    def init_weights(self, seed: int) -> None:
        """Normal(0, 0.02) for matrices, residual-output projections scaled by 1/sqrt(2L); norms at 1."""
        gen = torch.Generator(device=self.embed.weight.device).manual_seed(seed)
        out_std = 0.02 / math.sqrt(2 * self.cfg.layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                else:
                    std = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                    p.normal_(0.0, std, generator=gen)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        if self.rope_cos.shape[0] < seq:
            self.reset_rope(seq)
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        h = self.embed(input_ids)
        for layer in self.layers:
            if self.checkpoint_layers and self.training:
                h = checkpoint(layer, h, cos, sin, use_reentrant=False)
            else:
                h = layer(h, cos, sin)
        return self.head(self.norm(h), labels)


def set_gqa_native(model: nn.Module, native: bool) -> None:
    for m in model.modules():
        if isinstance(m, Attention):
            m.gqa_native = native


def fused_sdpa_supports_gqa(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a fused (non-math) SDPA backend runs causal GQA at these head counts, forward and backward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, cfg.heads, 128, cfg.head_dim, device=device, dtype=dtype, requires_grad=True)
    kv = torch.randn(1, cfg.kv_heads, 128, cfg.head_dim, device=device, dtype=dtype)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True).sum().backward()
        return True
    except RuntimeError:
        return False


def build_model(
    cfg: ModelConfig,
    device: str | torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    checkpoint_layers: bool = False,
) -> LlamaModel:
    """A randomly initialised model on ``device``: built and initialised in fp32, then cast to ``dtype``."""
    with torch.device(device):
        model = LlamaModel(cfg, checkpoint_layers=checkpoint_layers)
    model.init_weights(seed)
    model.to(dtype)
    model.reset_rope(cfg.seq)
    return model.train()


def synthetic_batches(
    cfg: ModelConfig, batch: int, seq: int, count: int, seed: int, device: str | torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` (input_ids, labels) pairs from a learnable synthetic language.

    Tokens follow a fixed random successor table with probability 3/4 and are uniform otherwise, so
    the loss falls steadily during a short run: a variant whose gradients are wrong shows up as a
    different loss curve, which uniform random tokens (nothing to learn) would hide. Generated on
    the CPU with a seeded generator, so every variant and device sees the same tokens.
    """
    gen = torch.Generator().manual_seed(seed)
    successor = torch.randperm(cfg.vocab, generator=gen)
    out = []
    for _ in range(count):
        tokens = torch.empty(batch, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(cfg.vocab, (batch,), generator=gen)
        follow = torch.rand(batch, seq, generator=gen) < 0.75
        noise = torch.randint(cfg.vocab, (batch, seq), generator=gen)
        for t in range(seq):
            tokens[:, t + 1] = torch.where(follow[:, t], successor[tokens[:, t]], noise[:, t])
        tokens = tokens.to(device)
        out.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    return out
