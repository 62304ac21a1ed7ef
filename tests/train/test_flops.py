"""FLOP formulas: published MFU figures reproduced, and FlopCounterMode agreement on `tiny`."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from solkit.errors import SolkitError
from solkit.train.config import get_config
from solkit.train.flops import (
    attention_flops_per_token,
    flops_per_token,
    mfu,
    param_counts,
    recompute_flops_per_token,
    utilisation,
)
from solkit.train.model import build_model, synthetic_batches

H100_BF16_DENSE = 989e12  # the peak torchtitan divides by (its get_peak_flops for H100 SXM)


def test_llama31_8b_flops_per_token_match_published_conventions():
    cfg = get_config("llama3.1-8b")
    assert cfg.seq == 8192
    assert param_counts(cfg)["total"] == pytest.approx(8.03e9, rel=2e-3)
    # mfu.md §3: 57.91 G (PaLM/torchtitan) and 51.47 G (Megatron, causal ÷ 2) per token at T = 8192.
    assert flops_per_token(cfg, 8192, "palm") / 1e9 == pytest.approx(57.91, abs=0.01)
    assert flops_per_token(cfg, 8192, "megatron") / 1e9 == pytest.approx(51.47, abs=0.01)
    assert flops_per_token(cfg, 2048, "palm") / 1e9 == pytest.approx(48.25, abs=0.01)


@pytest.mark.parametrize(("tokens_per_s", "published_pct"), [(5762, 33.7), (6667, 39.0)])
def test_torchtitan_published_mfu_reproduced(tokens_per_s, published_pct):
    """torchtitan Llama-3.1-8B, 8×H100, FSDP, seq 8192: eager 5,762 and compiled 6,667 tok/s per GPU."""
    f = flops_per_token(get_config("llama3.1-8b"), 8192, "palm")
    assert round(100 * mfu(tokens_per_s, f, H100_BF16_DENSE), 1) == published_pct


def test_solkit_configs_match_reference_table():
    """mfu.md §7: llama3-8b-L8 2.80 B params, 15.23 G/token at T 4096 (16.84 at 8192); 1B 9.03 G."""
    l8 = get_config("llama3-8b-L8")
    assert param_counts(l8)["total"] / 1e9 == pytest.approx(2.80, abs=0.005)
    assert flops_per_token(l8, 4096) / 1e9 == pytest.approx(15.23, abs=0.02)
    assert flops_per_token(l8, 8192) / 1e9 == pytest.approx(16.84, abs=0.02)
    one_b = get_config("llama3.2-1b")
    assert param_counts(one_b)["total"] / 1e9 == pytest.approx(1.24, abs=0.005)
    assert flops_per_token(one_b, 4096) / 1e9 == pytest.approx(9.03, abs=0.02)
    # the LM head's share of the 8-layer model (20.7 % in mfu.md)
    assert 6 * l8.vocab * l8.hidden / flops_per_token(l8, 4096) == pytest.approx(0.207, abs=0.002)


@pytest.mark.parametrize("tied", [False, True])
def test_param_counts_match_the_built_model(tied):
    cfg = get_config("tiny", tie_embeddings=tied, heads=4, kv_heads=1)
    model = build_model(cfg, "cpu", torch.float32)
    assert sum(p.numel() for p in model.parameters()) == param_counts(cfg)["total"]
    linear = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)
    assert param_counts(cfg)["gemm"] == linear + (cfg.vocab * cfg.hidden if tied else 0)


def _counted_flops(cfg, batch, seq, backend):
    model = build_model(cfg, "cpu", torch.float32, seed=0)
    x, y = synthetic_batches(cfg, batch, seq, 1, 0, "cpu")[0]
    counter = FlopCounterMode(display=False)
    with counter, sdpa_kernel(backend):
        model(x, y).backward()
    return counter.get_flop_counts()["Global"]


def test_flop_counter_agrees_with_6n_term_on_tiny():
    """Every GEMM FLOP of forward + backward on the eager tiny model is 6 · N_gemm per token."""
    cfg = get_config("tiny")
    batch, seq = 2, 32
    counts = _counted_flops(cfg, batch, seq, SDPBackend.FLASH_ATTENTION)
    aten = torch.ops.aten
    gemm = sum(v for k, v in counts.items() if k in (aten.mm, aten.addmm))
    tokens = batch * seq
    assert gemm == 6 * param_counts(cfg)["gemm"] * tokens
    # PaLM's 6N differs from the GEMM count only by the norm weights (no matmul), a tiny share.
    six_n = flops_per_token(cfg, seq, "palm") - attention_flops_per_token(cfg, seq, "palm")
    assert six_n * tokens / gemm == pytest.approx(1.0, abs=1e-3)
    assert six_n * tokens > gemm


def test_flop_counter_agrees_with_palm_attention_term():
    """With the math SDPA backend, QKᵀ and PV are plain bmms: fwd + bwd = 12·L·H·Q·T per token (no causal discount)."""
    cfg = get_config("tiny")
    batch, seq = 2, 32
    counts = _counted_flops(cfg, batch, seq, SDPBackend.MATH)
    attn = counts.get(torch.ops.aten.bmm, 0)
    assert attn == attention_flops_per_token(cfg, seq, "palm") * batch * seq
    assert attention_flops_per_token(cfg, seq, "megatron") == attention_flops_per_token(cfg, seq, "palm") / 2


def test_hfu_counts_recompute_and_mfu_does_not():
    cfg = get_config("llama3-8b-L8")
    peaks = {"datasheet": 989.4e12, "calibrated": 676e12}
    plain = utilisation(cfg, 4096, 20_000.0, peaks, recompute=False)
    ac = utilisation(cfg, 4096, 20_000.0, peaks, recompute=True)
    assert plain["palm"]["hfu_datasheet"] is None
    assert ac["palm"]["mfu_datasheet"] == plain["palm"]["mfu_datasheet"]
    extra = recompute_flops_per_token(cfg, 4096)
    assert ac["palm"]["hfu_datasheet"] == pytest.approx(20_000 * (flops_per_token(cfg, 4096) + extra) / 989.4e12)
    # the recompute is one forward of the layers: a third of their GEMM and attention training FLOPs
    layers_train = 6 * cfg.layers * param_counts(cfg)["layer_gemm"] + attention_flops_per_token(cfg, 4096)
    assert extra == pytest.approx(layers_train / 3)
    assert plain["palm"]["mfu_calibrated"] > plain["palm"]["mfu_datasheet"]
    assert math.isclose(plain["megatron"]["mfu_datasheet"] / plain["palm"]["mfu_datasheet"],
                        flops_per_token(cfg, 4096, "megatron") / flops_per_token(cfg, 4096, "palm"))  # fmt: skip


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(SolkitError, match="allowed"):
        flops_per_token(get_config("tiny"), 128, "nanogpt")  # type: ignore[arg-type]
    with pytest.raises(SolkitError, match="positive"):
        mfu(1.0, 1.0, 0.0)
    with pytest.raises(SolkitError, match="allowed: "):
        get_config("llama-70b")
    with pytest.raises(SolkitError, match="kv_heads"):
        get_config("tiny", heads=4, kv_heads=3)
