"""The Llama-style model: each swappable module computes what its docstring says."""

from __future__ import annotations

import math

import pytest
import torch

from solkit.train.config import get_config
from solkit.train.model import LinearResidual, LlamaRMSNorm, LMHeadLoss, Rotary, SiluMul, build_model, synthetic_batches


def test_rmsnorm_matches_formula_in_float64():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 37)
    norm = LlamaRMSNorm(37, 1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    ref = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    assert torch.allclose(norm(x).double(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(4, 2, 8), (3, 1, 6)])
def test_rope_is_a_rotation_by_position_angles(heads, kv_heads, head_dim):
    cfg = get_config("tiny", heads=heads, kv_heads=kv_heads, head_dim=head_dim, seq=7)
    model = build_model(cfg, "cpu", torch.float64)
    torch.manual_seed(1)
    q = torch.randn(2, 7, heads, head_dim, dtype=torch.float64)
    k = torch.randn(2, 7, kv_heads, head_dim, dtype=torch.float64)
    qr, kr = Rotary()(q, k, model.rope_cos, model.rope_sin)
    half = head_dim // 2
    inv = 1.0 / cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half)
    angle = torch.arange(7, dtype=torch.float64)[:, None] * inv  # (T, D/2)
    z = torch.complex(q[..., :half], q[..., half:]) * torch.polar(torch.ones_like(angle), angle)[:, None, :]
    assert torch.allclose(qr, torch.cat((z.real, z.imag), -1), atol=1e-6)  # cos/sin tables are fp32
    assert torch.allclose(kr.norm(dim=-1), k.norm(dim=-1))  # a rotation keeps norms
    assert torch.equal(qr[:, 0], q[:, 0])  # position 0 does not move


def test_silu_mul_and_linear_residual():
    torch.manual_seed(2)
    g, u = torch.randn(4, 9), torch.randn(4, 9)
    assert torch.allclose(SiluMul()(g, u), g * torch.sigmoid(g) * u)
    lin = LinearResidual(9, 5)
    torch.nn.init.normal_(lin.weight)
    x, r = torch.randn(4, 9), torch.randn(4, 5)
    assert torch.allclose(lin(x, residual=r), x @ lin.weight.T + r, atol=1e-6)
    assert torch.allclose(lin(x), x @ lin.weight.T, atol=1e-6)


def test_lm_head_loss_is_mean_cross_entropy():
    torch.manual_seed(3)
    w = torch.nn.Parameter(torch.randn(11, 6))
    h, labels = torch.randn(2, 3, 6), torch.randint(11, (2, 3))
    logits = (h @ w.T).double()
    ref = -(logits.log_softmax(-1).gather(-1, labels[..., None])).mean()
    assert LMHeadLoss(w)(h, labels).item() == pytest.approx(ref.item(), rel=1e-5)


def test_model_initial_loss_tied_weights_and_determinism():
    cfg = get_config("tiny", seq=16)
    a = build_model(cfg, "cpu", torch.float32, seed=5)
    b = build_model(cfg, "cpu", torch.float32, seed=5)
    c = build_model(cfg, "cpu", torch.float32, seed=6)
    x, y = synthetic_batches(cfg, 2, 16, 1, 0, "cpu")[0]
    la, lb, lc = a(x, y).item(), b(x, y).item(), c(x, y).item()
    assert la == lb and la != lc
    assert la == pytest.approx(math.log(cfg.vocab), abs=0.3)  # random init predicts near-uniformly
    tied = build_model(get_config("tiny", tie_embeddings=True), "cpu", torch.float32)
    assert tied.head.weight is tied.embed.weight
    assert build_model(cfg, "cpu", torch.bfloat16).rope_cos.dtype == torch.float32


def test_synthetic_language_is_learnable_and_seeded():
    cfg = get_config("tiny", vocab=64)
    (x1, y1), (x2, _) = synthetic_batches(cfg, 2, 50, 2, seed=9, device="cpu")
    again = synthetic_batches(cfg, 2, 50, 2, seed=9, device="cpu")[0][0]
    assert torch.equal(x1, again) and not torch.equal(x1, x2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # labels are the next tokens
    # about 3/4 of transitions follow one fixed successor table: the most common successor dominates
    pairs = torch.stack((x1.flatten()[:-1], x1.flatten()[1:]), 1)
    pairs = pairs[torch.arange(len(pairs)) % 50 != 49]  # drop pairs across rows
    follow = {}
    for a, b in pairs.tolist():
        follow.setdefault(a, []).append(b)
    top = sum(max(v.count(t) for t in set(v)) for v in follow.values())
    assert top / len(pairs) > 0.6


def test_checkpointed_model_gives_same_loss_and_grads():
    cfg = get_config("tiny", seq=16)
    x, y = synthetic_batches(cfg, 1, 16, 1, 0, "cpu")[0]
    plain = build_model(cfg, "cpu", torch.float64, seed=1)
    ckpt = build_model(cfg, "cpu", torch.float64, seed=1, checkpoint_layers=True)
    plain(x, y).backward()
    ckpt(x, y).backward()
    for p, q in zip(plain.parameters(), ckpt.parameters()):
        assert torch.allclose(p.grad, q.grad)


def test_repeated_kv_heads_equal_native_gqa():
    from solkit.train.model import set_gqa_native

    cfg = get_config("tiny", seq=16, heads=4, kv_heads=2)
    model = build_model(cfg, "cpu", torch.float64, seed=2)
    x, y = synthetic_batches(cfg, 1, 16, 1, 0, "cpu")[0]
    native = model(x, y).item()
    set_gqa_native(model, False)
    assert model(x, y).item() == pytest.approx(native, rel=1e-12)
