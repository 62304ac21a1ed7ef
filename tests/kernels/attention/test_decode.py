"""Decode attention (split-KV, paged) against an fp64 loop reference: tiny shapes in the CPU interpreter (fp32 and
fp16), Llama-3-8B heads in bf16 on a GPU."""

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.attention import PATHS, decode_attention
from solkit.kernels.attention.decode import DEFAULT_OPTIONS, resident_slots, split_plan
from solkit.kernels.common.capability import caps_for_product


def reference(q, k, v, lens):
    """fp64: query token i of sequence b sits at lens[b] - lq + i and sees keys 0..itself; GQA by repetition."""
    b, lq, h, d = q.shape
    g = h // k.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for s in range(b):
        n = int(lens[s])
        kk = k[s, :n].double().cpu().repeat_interleave(g, 1)
        vv = v[s, :n].double().cpu().repeat_interleave(g, 1)
        for i in range(lq):
            pos = n - lq + i
            w = torch.einsum("hd,nhd->hn", q[s, i].double().cpu(), kk[: pos + 1]) * d**-0.5
            out[s, i] = torch.einsum("hn,nhd->hd", w.softmax(-1), vv[: pos + 1])
    return out


def paged(k, v, lens, block_size, spare=3, seed=0):
    """The same cache as scattered blocks (a shuffled block pool with spare blocks) and its block table."""
    b, cap, kvh, d = k.shape
    per = -(-cap // block_size)
    n_blocks = b * per + spare
    order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed))
    kc = torch.zeros((n_blocks, block_size, kvh, d), dtype=k.dtype, device=k.device)
    vc = torch.zeros_like(kc)
    table = torch.zeros((b, per), dtype=torch.int32)
    used = 0
    for s in range(b):
        for j in range(-(-int(lens[s]) // block_size)):
            blk, n = int(order[used]), min(block_size, int(lens[s]) - j * block_size)
            used += 1
            table[s, j] = blk
            kc[blk, :n], vc[blk, :n] = (
                k[s, j * block_size : j * block_size + n],
                v[s, j * block_size : j * block_size + n],
            )
    return kc, vc, table.to(k.device)


def inputs(b, lq, h, kvh, d, cap, lens, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return mk(b, lq, h, d), mk(b, cap, kvh, d), mk(b, cap, kvh, d), torch.tensor(lens, dtype=torch.int32, device=device)


TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize(
    "dtype,lq,h,kvh,d,lens,options",
    [
        (torch.float32, 1, 4, 2, 16, [1, 70, 33], None),  # a sequence of length 1; uneven lengths
        (torch.float16, 2, 4, 1, 32, [2, 45], {"num_splits": 3, "block_n": 16}),  # 2 query tokens, splits
        (torch.float32, 3, 6, 3, 24, [90, 5], {"num_splits": 4, "block_n": 16}),  # odd head dim, 3 tokens
        (torch.float32, 1, 8, 2, 16, [33, 64], {"num_splits": 3, "block_n": 16, "combine": "kernel"}),
    ],
)
def test_contiguous_and_paged_match_reference(dtype, lq, h, kvh, d, lens, options):
    q, k, v, sl = inputs(len(lens), lq, h, kvh, d, max(lens) + 3, lens, dtype)
    ref = reference(q, k, v, sl)
    out = decode_attention(q, k, v, sl, options=options)
    assert out.shape == q.shape and out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, atol=TOL[dtype], rtol=TOL[dtype])
    kc, vc, table = paged(k, v, sl, block_size=16)
    out_p = decode_attention(q, kc, vc, sl, table, options=options)
    torch.testing.assert_close(out_p.double(), ref, atol=TOL[dtype], rtol=TOL[dtype])


def test_split_plan_fills_whole_waves_and_covers_every_key():
    caps = caps_for_product("h200-sxm")
    slots = resident_slots(caps, 16, 128, 2, DEFAULT_OPTIONS)
    assert slots == caps.sm_count * 3  # 2 stages of 64-key K and V tiles + Q: 3 programs in 228 KB
    for pairs, n in [(8, 8192), (64, 32768), (512, 131072), (1, 100), (3, 1000)]:
        splits, chunk = split_plan(pairs, n, 64, slots)
        assert 1 <= splits <= 64 and chunk % 64 == 0 and splits * chunk >= n > (splits - 1) * chunk
        waves = pairs * splits / slots
        assert waves <= 1 or waves / -(-pairs * splits // slots) > 0.85  # the last wave nearly full
    assert split_plan(8, 8192, 64, slots)[0] > 32  # batch 1: one wave of about a slot per program
    assert split_plan(64, 32768, 64, slots)[0] == 6  # batch 8: 384 programs, not 576 (1.45 waves)


def test_bad_inputs_are_one_line_errors():
    q, k, v, sl = inputs(2, 1, 4, 2, 16, 8, [3, 8], torch.float32)
    with pytest.raises(SolkitError, match="kv heads"):
        decode_attention(torch.randn(2, 1, 5, 16), k, v, sl)
    with pytest.raises(SolkitError, match="seq_lens"):
        decode_attention(q, k, v, sl[:1])
    with pytest.raises(SolkitError, match="dtype"):
        decode_attention(q.half(), k, v, sl)


def test_custom_op_and_paths():
    assert "decode_attention" in PATHS and PATHS["decode_attention"][-1][1].portable
    assert hasattr(torch.ops.solkit, "decode_attention")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(2, 1, 8, 64, dtype=torch.bfloat16), torch.empty(2, 100, 2, 64, dtype=torch.bfloat16)
        out = torch.ops.solkit.decode_attention(q, k, k, torch.empty(2, dtype=torch.int32), None, 0.125, 0, None)
    assert out.shape == q.shape and out.dtype == torch.bfloat16


@pytest.mark.gpu
@pytest.mark.parametrize("batch,kv_len,block_size", [(1, 8192, 16), (8, 4099, 64), (3, 40000, 256)])
def test_llama3_8b_heads_bf16_paged(batch, kv_len, block_size):
    lens = [kv_len - 37 * i for i in range(batch)]
    q, k, v, sl = inputs(batch, 1, 32, 8, 128, kv_len, lens, torch.bfloat16, device="cuda")
    ref = reference(q, k, v, sl)
    kc, vc, table = paged(k, v, sl, block_size)
    out = decode_attention(q, kc, vc, sl, table)
    atol = TOL[torch.bfloat16] * ref.abs().max().item()  # an average over thousands of values is small
    torch.testing.assert_close(out.double().cpu(), ref, atol=atol, rtol=TOL[torch.bfloat16])
    torch.testing.assert_close(decode_attention(q, k, v, sl).double().cpu(), ref, atol=atol, rtol=TOL[torch.bfloat16])


@pytest.mark.gpu
def test_against_sdpa_with_few_query_tokens():
    q, k, v, sl = inputs(2, 4, 32, 8, 128, 2048, [2048, 2048], torch.bfloat16, device="cuda")
    # the 4 new tokens are the last 4 positions: SDPA with a bottom-right causal mask is the same attention
    mask = torch.ones(4, 2048, dtype=torch.bool, device="cuda").tril(2048 - 4)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, enable_gqa=True
    ).transpose(1, 2)
    atol = 2e-2 * want.abs().max().item()
    torch.testing.assert_close(decode_attention(q, k, v, sl).float(), want.float(), atol=atol, rtol=2e-2)
