"""solkit.kernels.rope.rotary: RoPE on q and k (one launch), half-split and interleaved, values and gradients.

Reference: HF-style ``x * cos + rotate(x) * sin`` in float64 (rotate_half for the half-split layout,
pairwise rotation for the interleaved one). CPU runs use the Triton interpreter (fp32, fp16);
bf16 and Llama-3-8B sizes are marked gpu.
"""

from __future__ import annotations

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.rope import RoPE, apply_rope
from solkit.kernels.rope.rotary import rope_backward, rope_bytes, rope_forward

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rotate(x, interleaved):
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def ref_rope(x, cos, sin, interleaved):
    """x [B, S, H, D]; cos/sin broadcastable as [B, S, 1, D]."""
    return x * cos + rotate(x, interleaved) * sin


def tables(seq, dim, interleaved, batch=None, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pos = torch.arange(seq, dtype=torch.float64)[:, None] + (0 if batch is None else torch.arange(batch)[:, None, None])
    ang = pos * inv
    ang = torch.stack((ang, ang), -1).flatten(-2) if interleaved else torch.cat((ang, ang), -1)
    return ang.cos(), ang.sin()


def _assert_close(out, ref, torch_out, atol):
    assert torch.isfinite(out).all()
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol * max(ref.abs().max().item(), 1.0)
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(q, k, cos, sin, interleaved, cos_b=None, sin_b=None, layout="bshd", position_ids=None):
    """cos_b/sin_b: the tables broadcast as [B or 1, S, 1, D] for the reference (bshd)."""
    dtype = q.dtype
    cos_b = cos if cos_b is None else cos_b
    sin_b = sin if sin_b is None else sin_b
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    qo, ko = apply_rope(q, k, cos, sin, position_ids, interleaved=interleaved, layout=layout)
    dq, dk = torch.randn_like(qo), torch.randn_like(ko)
    gq, gk = torch.autograd.grad((qo, ko), (q, k), (dq, dk))

    def to_bshd(t):
        return t.transpose(1, 2) if layout == "bhsd" else t

    results = []
    for cast in (torch.float64, dtype):
        q2 = to_bshd(q.detach()).to(cast).requires_grad_()
        k2 = to_bshd(k.detach()).to(cast).requires_grad_()
        c, s = cos_b.to(q.device, cast), sin_b.to(q.device, cast)
        rq, rk = ref_rope(q2, c, s, interleaved), ref_rope(k2, c, s, interleaved)
        rgq, rgk = torch.autograd.grad((rq, rk), (q2, k2), (to_bshd(dq).to(cast), to_bshd(dk).to(cast)))
        results.append((rq.detach(), rk.detach(), rgq, rgk))
    (rq, rk, rgq, rgk), (tq, tk, tgq, tgk) = results
    for got, ref, tor in zip((qo, ko, gq, gk), (rq, rk, rgq, rgk), (tq, tk, tgq, tgk)):
        assert got.dtype == dtype and got.shape == (q.shape if got.shape == q.shape else k.shape)
        _assert_close(to_bshd(got), ref, tor, ATOL[dtype])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 2), (2, 5, 4, 2, 16), (1, 7, 3, 1, 64), (3, 2, 5, 5, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_values_and_grads(interleaved, dims, dtype, device):
    b, s, hq, hk, d = dims
    torch.manual_seed(sum(dims))
    q = torch.randn(b, s, hq, d).to(device, dtype)
    k = torch.randn(b, s, hk, d).to(device, dtype)
    cos, sin = tables(s, d, interleaved)
    _check(q, k, cos.to(device, dtype), sin.to(device, dtype), interleaved, cos[None, :, None], sin[None, :, None])


@pytest.mark.parametrize("interleaved", [False, True])
def test_bhsd_layout_and_per_batch_tables(interleaved, device):
    b, s, hq, hk, d = 2, 6, 4, 2, 16
    q = torch.randn(b, hq, s, d, device=device)
    k = torch.randn(b, hk, s, d, device=device)
    cos, sin = tables(s, d, interleaved, batch=b)  # [B, S, D], different positions per batch
    hf_cos, hf_sin = cos[:, None].float().to(device), sin[:, None].float().to(device)  # HF: [B, 1, S, D]
    _check(q, k, hf_cos, hf_sin, interleaved, cos[:, :, None], sin[:, :, None], layout="bhsd")


def test_position_ids_and_strided_qkv_views(device):
    """q/k as views of one fused qkv projection (strided heads), cos/sin a table indexed by positions."""
    b, s, hq, hk, d = 2, 5, 4, 2, 32
    qkv = torch.randn(b, s, (hq + 2 * hk) * d, device=device)
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hk) * d].view(b, s, hk, d)
    assert not q.is_contiguous()
    table_cos, table_sin = tables(64, d, False)
    pos = torch.randint(0, 64, (b, s), device=device)
    cos_b = table_cos.to(device)[pos][:, :, None]
    sin_b = table_sin.to(device)[pos][:, :, None]
    _check(q, k, table_cos.float().to(device), table_sin.float().to(device), False, cos_b, sin_b, position_ids=pos)


@pytest.mark.parametrize("tokens", [2, 3])
def test_several_tokens_per_program(tokens, device, monkeypatch):
    """ROPE_CONFIG["tokens"] > 1, with a token count that does not divide evenly (tail program)."""
    from solkit.kernels.rope import rotary as rope_mod

    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "tokens", tokens)
    b, s, hq, hk, d = 1, 7, 4, 2, 16
    q, k = torch.randn(b, s, hq, d, device=device), torch.randn(b, s, hk, d, device=device)
    cos, sin = tables(s, d, False)
    _check(q, k, cos.float().to(device), sin.float().to(device), False, cos[None, :, None], sin[None, :, None])


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 4])
def test_tile_kernel(tokens, interleaved, device, monkeypatch):
    """ROPE_CONFIG["tile"]: whole tokens per program (q and k heads as one tile each); odd head counts
    (padded to a power of two, masked), a token count that leaves a partial last program, a batch of
    per-sequence tables, bhsd layout, fp16."""
    from solkit.kernels.rope import rotary as rope_mod

    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "tile", 1)
    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "max_tile", 4096)
    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "tokens", tokens)
    b, s, hq, hk, d = 2, 7, 5, 3, 16
    q, k = torch.randn(b, s, hq, d, device=device), torch.randn(b, s, hk, d, device=device)
    cos, sin = tables(s, d, interleaved, batch=b)
    _check(q, k, cos.float().to(device), sin.float().to(device), interleaved, cos[:, :, None], sin[:, :, None])
    qh, kh = (t.transpose(1, 2).contiguous().half() for t in (q, k))
    cos1, sin1 = tables(s, d, interleaved)
    _check(qh, kh, cos1.half().to(device), sin1.half().to(device), interleaved, cos1[None, :, None],
           sin1[None, :, None], layout="bhsd")  # fmt: skip


def test_module_and_launchers(device):
    q, k = torch.randn(1, 3, 2, 8, device=device), torch.randn(1, 3, 1, 8, device=device)
    cos, sin = (t.float().to(device) for t in tables(3, 8, True))
    mod = RoPE(interleaved=True)
    assert "interleaved=True" in repr(mod)
    qo, ko = mod(q, k, cos, sin)
    fq, fk = rope_forward(q, k, cos, sin, interleaved=True)
    torch.testing.assert_close(qo, fq)
    bq, bk = rope_backward(fq, fk, cos, sin, interleaved=True)  # rotation by -theta undoes it
    torch.testing.assert_close(bq, q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bk, k, atol=1e-5, rtol=1e-5)


def test_bad_inputs_raise(device):
    q, k = torch.randn(1, 3, 2, 8, device=device), torch.randn(1, 3, 1, 8, device=device)
    cos, sin = (t.float().to(device) for t in tables(3, 8, False))
    with pytest.raises(SolkitError, match="layout"):
        apply_rope(q, k, cos, sin, layout="sbhd")
    with pytest.raises(SolkitError, match="4-D"):
        apply_rope(q[0], k, cos, sin)
    with pytest.raises(SolkitError, match="head_dim"):
        apply_rope(q, k, cos[:, :4], sin[:, :4])
    with pytest.raises(SolkitError, match="disagree"):
        apply_rope(q, torch.randn(1, 4, 1, 8, device=device), cos, sin)
    with pytest.raises(SolkitError, match="power of two"):
        apply_rope(
            torch.randn(1, 3, 2, 6, device=device), torch.randn(1, 3, 1, 6, device=device), cos[:, :6], sin[:, :6]
        )


def test_byte_count():
    qk = 2 * 2 * 8192 * 128 * (32 + 8)
    assert rope_bytes(1, 8192, 32, 8, 128, torch.bfloat16) == qk + 2 * 2 * 8192 * 128
    assert rope_bytes(1, 8192, 32, 8, 128, torch.bfloat16, backward=True) == 2 * (qk + 2 * 2 * 8192 * 128)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [0, 1])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_llama3_8b(interleaved, dtype, tile, monkeypatch):
    from solkit.kernels.rope import rotary as rope_mod

    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "tile", tile)
    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "max_tile", max(rope_mod.ROPE_CONFIG["max_tile"], 16384 * tile))
    monkeypatch.setitem(rope_mod.ROPE_CONFIG, "tokens", 2 * tile + 1)
    torch.manual_seed(0)
    b, s, hq, hk, d = 1, 2048, 32, 8, 128
    q = torch.randn(b, s, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dtype)
    cos, sin = tables(s, d, interleaved, theta=500000.0)
    _check(q, k, cos.cuda().to(dtype), sin.cuda().to(dtype), interleaved, cos[None, :, None], sin[None, :, None])


def test_inputs_and_incoming_grads_are_not_modified(device):
    """Unlike in-place RoPE kernels, q, k, cos, sin and the incoming dq/dk are left untouched."""
    q, k = torch.randn(1, 4, 4, 16, device=device), torch.randn(1, 4, 2, 16, device=device)
    cos, sin = (t.float().to(device) for t in tables(4, 16, False))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    keep = [t.clone() for t in (q, k, cos, sin, dq, dk)]
    qs, ks = q.clone().requires_grad_(), k.clone().requires_grad_()
    qo, ko = apply_rope(qs, ks, cos, sin)
    torch.autograd.grad((qo, ko), (qs, ks), (dq, dk))
    for before, after in zip(keep, (qs.detach(), ks.detach(), cos, sin, dq, dk)):
        assert torch.equal(before, after)


@pytest.mark.parametrize("max_tile", [64, 128, 512])
def test_head_chunks(max_tile, device):
    """Tokens wider than ``max_tile`` are cut into head chunks (second grid axis): odd q and k head counts,
    chunks that hold no k heads, both layouts of the pairs."""
    from solkit.kernels.rope.rotary import rope_plan

    b, s, hq, hk, d = 1, 3, 7, 3, 16
    cfg = {"num_warps": 4, "max_tile": max_tile, "tokens": 4, "tile": 1}
    block_t, bq, bk, chunks = rope_plan(hq, hk, d, cfg)
    assert chunks * bq >= hq and chunks * bk >= hk and (bq + bk) * d * block_t <= max(max_tile, 2 * d)
    assert (chunks > 1) == (max_tile < 192)
    for interleaved in (False, True):
        q, k = torch.randn(b, s, hq, d, device=device), torch.randn(b, s, hk, d, device=device)
        cos, sin = (t.float().to(device) for t in tables(s, d, interleaved))
        ref_q, ref_k = rope_forward(q, k, cos, sin, interleaved=interleaved, config={"max_tile": 8192})
        got_q, got_k = rope_forward(q, k, cos, sin, interleaved=interleaved, config=cfg)
        torch.testing.assert_close(got_q, ref_q)
        torch.testing.assert_close(got_k, ref_k)
        back_q, back_k = rope_backward(got_q, got_k, cos, sin, interleaved=interleaved, config=cfg)
        torch.testing.assert_close(back_q, q, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(back_k, k, atol=1e-5, rtol=1e-5)


def test_shape_configs():
    """Per-shape launch settings: Llama-3-8B takes the defaults, Llama-3-70B (64 + 8 heads) its own entry,
    whole tokens per program in both."""
    from solkit.kernels.rope.rotary import ROPE_CONFIG, rope_config, rope_plan

    assert rope_config(32, 8, 128) == ROPE_CONFIG
    cfg70 = rope_config(64, 8, 128)
    assert cfg70["max_tile"] >= (64 + 8) * 128
    assert rope_plan(64, 8, 128, cfg70)[1:] == (64, 8, 1)
    assert rope_plan(64, 8, 128, {**cfg70, "max_tile": 8192})[1:] == (32, 4, 2)
    assert rope_config(128, 128, 256) == ROPE_CONFIG  # beyond every entry: the defaults (head chunks)


@pytest.mark.gpu
@pytest.mark.parametrize("max_tile", [8192, 16384])
def test_gpu_llama3_70b_heads(max_tile):
    """The Llama-3-70B head layout (64 q, 8 kv heads), whole tokens or two head chunks per program, bf16."""
    torch.manual_seed(1)
    b, s, hq, hk, d = 1, 1024, 64, 8, 128
    q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    cos, sin = tables(s, d, False, theta=500000.0)
    from solkit.kernels.rope import rotary as rope_mod

    cfg = {**rope_mod.rope_config(hq, hk, d), "max_tile": max_tile}
    qo, ko = rope_forward(q, k, cos.cuda().bfloat16(), sin.cuda().bfloat16(), config=cfg)
    rq = ref_rope(q.double(), cos.cuda()[None, :, None], sin.cuda()[None, :, None], False)
    rk = ref_rope(k.double(), cos.cuda()[None, :, None], sin.cuda()[None, :, None], False)
    tq = ref_rope(q, cos.cuda().bfloat16()[None, :, None], sin.cuda().bfloat16()[None, :, None], False)
    tk = ref_rope(k, cos.cuda().bfloat16()[None, :, None], sin.cuda().bfloat16()[None, :, None], False)
    _assert_close(qo, rq, tq, ATOL[torch.bfloat16])
    _assert_close(ko, rk, tk, ATOL[torch.bfloat16])
    _check(q, k, cos.cuda().bfloat16(), sin.cuda().bfloat16(), False, cos[None, :, None], sin[None, :, None])
