"""Decode attention: one to a few new query tokens per sequence against a long KV cache, split-KV (flash-decoding)
with a combine step, GQA, contiguous or paged cache (vLLM / FlashInfer layout).

Layouts (``b`` batch, ``l`` new query tokens, ``h`` query heads, ``g = h / kv_heads`` the GQA group, ``d`` head dim):

* ``q`` ``[b, l, h, d]``; the output has ``q``'s shape and dtype;
* contiguous cache: ``k_cache``/``v_cache`` ``[b, capacity, kv_heads, d]``;
* paged cache: ``k_cache``/``v_cache`` ``[num_blocks, block_size, kv_heads, d]`` and ``block_table``
  ``[b, max_blocks]`` (int32: which block holds tokens ``j*block_size ...`` of sequence ``i``);
* ``seq_lens`` ``[b]`` int32: tokens in each sequence's cache, the ``l`` new ones included (they are written
  before the call, as vLLM does). Query token ``i`` sits at position ``seq_len - l + i`` and sees keys up to it.

A contiguous cache is a paged one with one block per sequence (``block_size`` = capacity, block ``i`` for
sequence ``i``), so one kernel serves both: every key tile looks its tokens' blocks up in the table.

Structure. One program per (sequence, kv head, split) holds the ``g x l`` query rows of that kv head (padded to
16 rows for ``tl.dot``), so every K/V tile is read once for the whole group. It streams its split's keys in
``block_n`` tiles with the online softmax (base 2, fp32 statistics and accumulator). With one split it writes
the output; with several it writes its normalised partial output and log-sum-exp (fp32), and the splits are
weighed: ``o = sum_s exp2(lse_s - M) o_s / sum_s exp2(lse_s - M)``, ``M = max_s lse_s``. By default the last split
of each (sequence, kv head) to finish does it (an arrival counter per pair, reset by that last program), which
saves a second launch; ``options={"combine": "kernel"}`` uses a separate combine kernel instead.
The split count (:func:`split_plan`) minimises ``waves x (PROGRAM_COST_KEYS + chunk)``: the programs of a wave
run at once in the part's resident slots (:func:`resident_slots`: SMs x programs one SM holds), each streams its
``chunk`` keys plus a fixed cost worth :data:`PROGRAM_COST_KEYS` keys, and a last wave only partly filled costs
as much as a full one. So ``b x kv_heads x splits`` lands just under a whole number of waves; no split is shorter
than :data:`MIN_SPLIT_TOKENS` keys, and there are at most :data:`MAX_SPLITS`.

Speed of light. Decode reads the cache once: bytes = K and V of every cached token
(``2 · sum(seq_lens) · kv_heads · d · e``, ``e`` bytes per element) + q and out (``2 · b · l · h · d · e``) +
the block table and lengths; the split partials add ``2 · splits · b · kv_heads · g·l · (d + 1) · 4`` (written
once, read once; 3 % at 8k tokens, 32 splits). FLOPs ``4 · sum(seq_lens) · h · l · d`` are ``g · l`` per byte in
16-bit (4 for Llama-3-8B decode), far under any ridge point:
T_SOL = bytes / memory bandwidth (:func:`sol_bytes`).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.capability import DeviceCaps, Needs, allowed, device_caps
from solkit.kernels.common.exchange import resident_programs
from solkit.kernels.common.ops import KernelOp, options, options_json

PROGRAM_COST_KEYS = 64  # a program's fixed cost (q load, the first tile's latency, the partial's write) ~ one tile
MIN_SPLIT_TOKENS = 128  # two tiles: a shorter split is mostly fixed cost
MAX_SPLITS = 64  # the combine kernel holds every split's partial row in registers
MIN_ROWS = 16  # tl.dot's smallest M
_LOG2E = 1.4426950408889634

#: Kernel -> its paths (the capability model). One Triton path: pointer loads, since paged tiles gather rows.
DECODE_PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "decode_attention": (("split_kv", Needs(note="split-KV with a combine; paged tiles gathered by pointer")),),
}
#: Launch settings: keys per tile and warps; ``num_splits`` (an int) overrides the split count; ``combine``:
#: ``"fused"`` (the last split to finish combines) or ``"kernel"`` (a second launch combines).
DEFAULT_OPTIONS = {"block_n": 64, "num_warps": 4, "num_stages": 2, "combine": "fused"}


@triton.jit
def _decode_split_kernel(
    Q, K, V, BT, SEQ, OUT, O_PART, LSE_PART, COUNT,
    s_qb, s_ql, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_btb, s_ob, s_ol, s_oh,
    kv_heads, page_size, chunk, n_splits, scale_log2,
    GROUP: tl.constexpr, LQ: tl.constexpr, M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr, FUSED: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // kv_heads
    kvh = bh % kv_heads
    rows = tl.arange(0, M)
    tok = rows // GROUP  # which new query token a row is
    head = kvh * GROUP + rows % GROUP  # which query head
    row_ok = rows < GROUP * LQ
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    seq_len = tl.load(SEQ + b)
    qpos = seq_len - LQ + tok  # each row's position: it sees keys 0..qpos
    q_ptr = Q + b.to(tl.int64) * s_qb + tok[:, None] * s_ql + head[:, None] * s_qh + d[None, :]
    q = tl.load(q_ptr, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, BLOCK_D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        offs = n0 + tl.arange(0, BLOCK_N)
        key_ok = offs < end
        page = tl.load(BT + b.to(tl.int64) * s_btb + offs // page_size, mask=key_ok, other=0).to(tl.int64)
        slot = offs % page_size
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k = tl.load(K + page[:, None] * s_kb + slot[:, None] * s_kt + kvh * s_kh + d[None, :], mask=kv_mask,
                    other=0.0)  # fmt: skip
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        s = tl.where(key_ok[None, :] & (offs[None, :] <= qpos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: keep exp2 finite
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + page[:, None] * s_vb + slot[:, None] * s_vt + kvh * s_vh + d[None, :], mask=kv_mask,
                    other=0.0)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    out_mask = row_ok[:, None] & d_ok[None, :]
    if SPLIT:
        base = (bh.to(tl.int64) * n_splits + split) * M
        tl.store(O_PART + (base + rows[:, None]) * BLOCK_D + d[None, :], o, mask=out_mask)
        tl.store(LSE_PART + base + rows, tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe)), mask=row_ok)
        if FUSED:
            # The last split of this (sequence, kv head) to finish combines: every thread's partial stores come
            # before the barrier, the barrier before the counter's release; the last one's acquire makes every
            # other split's partial visible to it. It then resets the counter for the next call.
            tl.debug_barrier()
            ticket = tl.atomic_add(COUNT + bh, 1, sem="acq_rel", scope="gpu")
            if ticket == n_splits - 1:
                _combine_rows(O_PART, LSE_PART, OUT, bh * n_splits * M, b, tok, head, rows, row_ok, d, out_mask,
                              s_ob, s_ol, s_oh, n_splits, M, BLOCK_D)  # fmt: skip
                tl.atomic_xchg(COUNT + bh, 0, sem="relaxed", scope="gpu")
    else:
        o_ptr = OUT + b.to(tl.int64) * s_ob + tok[:, None] * s_ol + head[:, None] * s_oh + d[None, :]
        tl.store(o_ptr, o.to(OUT.dtype.element_ty), mask=out_mask)


@triton.jit
def _combine_rows(O_PART, LSE_PART, OUT, first, b, tok, head, rows, row_ok, d, out_mask, s_ob, s_ol, s_oh, n_splits,
                  M: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Weigh every split's partial rows of one (sequence, kv head) by their log-sum-exp, online over the splits."""
    top = tl.full([M], float("-inf"), tl.float32)
    total = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, BLOCK_D], tl.float32)
    for sp in range(0, n_splits):
        base = first.to(tl.int64) + sp * M
        lse = tl.load(LSE_PART + base + rows, mask=row_ok, other=float("-inf"))
        part = tl.load(O_PART + (base + rows[:, None]) * BLOCK_D + d[None, :], mask=out_mask, other=0.0)
        new = tl.maximum(top, lse)
        safe = tl.where(new == float("-inf"), 0.0, new)
        old_w = tl.exp2(top - safe)
        w = tl.exp2(lse - safe)
        acc = acc * old_w[:, None] + part * w[:, None]
        total = total * old_w + w
        top = new
    o = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    o_ptr = OUT + b.to(tl.int64) * s_ob + tok[:, None] * s_ol + head[:, None] * s_oh + d[None, :]
    tl.store(o_ptr, o.to(OUT.dtype.element_ty), mask=out_mask)


@triton.jit
def _decode_combine_kernel(
    O_PART, LSE_PART, OUT, s_ob, s_ol, s_oh, kv_heads, n_splits,
    GROUP: tl.constexpr, M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    row = tl.program_id(1)
    b = bh // kv_heads
    kvh = bh % kv_heads
    sp = tl.arange(0, BLOCK_S)
    sp_ok = sp < n_splits
    d = tl.arange(0, BLOCK_D)
    base = (bh.to(tl.int64) * n_splits + sp) * M + row
    lse = tl.load(LSE_PART + base, mask=sp_ok, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp2(lse - top)
    parts = tl.load(O_PART + base[:, None] * BLOCK_D + d[None, :], mask=sp_ok[:, None], other=0.0)
    total = tl.sum(w, 0)
    o = tl.sum(parts * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tok = row // GROUP
    head = kvh * GROUP + row % GROUP
    tl.store(OUT + b.to(tl.int64) * s_ob + tok * s_ol + head * s_oh + d, o.to(OUT.dtype.element_ty),
             mask=d < HEAD_DIM)  # fmt: skip


def _check(q, k_cache, v_cache, seq_lens, block_table) -> None:
    if q.dim() != 4 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise SolkitError(
            f"decode_attention: q must be [b, l, heads, d] and k/v caches [.., .., kv_heads, d] of one shape; got "
            f"q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}"
        )
    b, _, h, dim = q.shape
    kvh = k_cache.shape[2]
    if k_cache.shape[3] != dim or h % kvh:
        raise SolkitError(f"decode_attention: head dims {dim}/{k_cache.shape[3]} differ or {h} heads are not a "
                          f"multiple of {kvh} kv heads")  # fmt: skip
    if q.dtype != k_cache.dtype or q.dtype != v_cache.dtype or q.dtype not in (torch.float16, torch.bfloat16,
                                                                               torch.float32):  # fmt: skip
        raise SolkitError(f"decode_attention: q/k/v dtype must match and be fp16, bf16 or fp32: "
                          f"{q.dtype}/{k_cache.dtype}/{v_cache.dtype}")  # fmt: skip
    if seq_lens.shape != (b,) or seq_lens.dtype not in (torch.int32, torch.int64):
        raise SolkitError(
            f"decode_attention: seq_lens must be [{b}] int32, got {tuple(seq_lens.shape)} {seq_lens.dtype}"
        )
    if block_table is None and k_cache.shape[0] != b:
        raise SolkitError(f"decode_attention: a contiguous cache needs one row per sequence: {k_cache.shape[0]} != {b}")
    if block_table is not None and (block_table.dim() != 2 or block_table.shape[0] != b):
        raise SolkitError(f"decode_attention: block_table must be [{b}, max_blocks], got {tuple(block_table.shape)}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise SolkitError("decode_attention: the head dimension of q and the caches must be contiguous")


def resident_slots(caps: DeviceCaps, rows: int, block_d: int, elem: int, opts: dict) -> int:
    """Programs of the split kernel the part holds at once: SMs x the fewest that shared memory (``num_stages``
    K and V tiles in flight and the Q tile, +1 KB the driver keeps per program), threads and the 32-program cap
    allow. Triton's interpreter: 2 (so its tests take several splits)."""
    if caps.is_interpreter or not caps.smem_per_sm:
        return 2
    warps = int(opts["num_warps"])
    smem = elem * block_d * (2 * int(opts["num_stages"]) * int(opts["block_n"]) + rows) + 1024
    return caps.sm_count * max(1, min(caps.smem_per_sm // smem, 2048 // (32 * warps), 32))


@functools.lru_cache(maxsize=1024)
def split_plan(pairs: int, max_len: int, block_n: int, slots: int) -> tuple[int, int]:
    """``(splits, chunk)`` for ``pairs`` (sequence, kv head) pairs of up to ``max_len`` keys on ``slots`` resident
    programs: the chunk (a multiple of ``block_n``, at least :data:`MIN_SPLIT_TOKENS`, at most
    :data:`MAX_SPLITS` of them) that minimises ``waves x (PROGRAM_COST_KEYS + chunk)`` (module docstring); ties go
    to fewer splits."""
    max_len = max(int(max_len), 1)
    shortest = max(triton.cdiv(max_len, MAX_SPLITS), min(MIN_SPLIT_TOKENS, max_len))
    best = None
    for chunk in range(triton.cdiv(shortest, block_n) * block_n, triton.cdiv(max_len, block_n) * block_n + 1, block_n):
        splits = triton.cdiv(max_len, chunk)
        cost = triton.cdiv(pairs * splits, slots) * (PROGRAM_COST_KEYS + chunk)
        if best is None or cost < best[0] or (cost == best[0] and splits < best[1]):
            best = (cost, splits, chunk)
    return best[1], best[2]


_COUNTERS: dict[tuple, torch.Tensor] = {}
#: Resident programs of the compiled split kernel per (device, dtype, group, query tokens, head dim, block_n,
#: warps, stages), read from its registers and shared memory after its first launch: later calls plan on it, the
#: first on :func:`resident_slots`' estimate.
_SLOTS: dict[tuple, int] = {}
_TABLES: dict[tuple, torch.Tensor] = {}


def _identity_table(device: torch.device, batch: int) -> torch.Tensor:
    """``[batch, 1]`` int32 ``0..batch-1``: a contiguous cache's block table, made once per device and batch (an
    ``arange`` per call would be a launch of its own). Read only."""
    key = (device, batch)
    if key not in _TABLES:
        _TABLES[key] = torch.arange(batch, device=device, dtype=torch.int32)[:, None]
    return _TABLES[key]


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 arrival counters, one per (sequence, kv head), kept per device and stream: the last split to
    arrive resets its counter, so the buffer is zero again after every call and is never cleared by a launch
    (a memset would cost a kernel of its own). Two calls running at once on one stream cannot happen; on two
    streams they get separate buffers."""
    key = (device, torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[key] = torch.zeros(max(n, 64), dtype=torch.int32, device=device)
    return buf


def sol_bytes(q: torch.Tensor, seq_lens: torch.Tensor, kv_heads: int) -> int:
    """The least traffic of one call (module docstring): K and V of every cached token, q and the output."""
    b, lq, h, dim = q.shape
    e = q.element_size()
    return 2 * int(seq_lens.sum()) * kv_heads * dim * e + 2 * b * lq * h * dim * e + seq_lens.numel() * 4


def decode_attention_forward(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor | None = None,
    scale: float | None = None,
    max_seq_len: int | None = None,
    launch: dict | None = None,
) -> torch.Tensor:
    """The launcher (module docstring for layouts). ``max_seq_len`` bounds the split plan without reading
    ``seq_lens`` on the host (default: the cache's capacity per sequence); ``launch`` overrides
    :data:`DEFAULT_OPTIONS` (``block_n``, ``num_warps``, ``num_stages``, ``num_splits``)."""
    _check(q, k_cache, v_cache, seq_lens, block_table)
    allowed(DECODE_PATHS["decode_attention"], device_caps(q), "decode_attention")
    opts = {**DEFAULT_OPTIONS, **(launch or {})}
    b, lq, h, dim = q.shape
    kvh = k_cache.shape[2]
    group = h // kvh
    out = torch.empty_like(q)
    if b == 0 or lq == 0:
        return out
    if block_table is None:  # one block per sequence (module docstring)
        block_table = _identity_table(q.device, b)
    page_size = k_cache.shape[1]
    capacity = block_table.shape[1] * page_size
    max_len = min(int(max_seq_len), capacity) if max_seq_len is not None else capacity
    block_n, block_d = int(opts["block_n"]), triton.next_power_of_2(dim)
    rows = max(MIN_ROWS, triton.next_power_of_2(group * lq))
    config = (q.device, q.dtype, group, lq, dim, block_n, int(opts["num_warps"]), int(opts["num_stages"]))
    if "num_splits" in opts:
        splits = max(1, min(int(opts["num_splits"]), MAX_SPLITS))
        chunk = triton.cdiv(triton.cdiv(max_len, splits), block_n) * block_n
        splits = triton.cdiv(max_len, chunk)
    else:
        slots = _SLOTS.get(config) or resident_slots(device_caps(q), rows, block_d, q.element_size(), opts)
        splits, chunk = split_plan(b * kvh, max_len, block_n, slots)
    scale = dim**-0.5 if scale is None else float(scale)
    part = lse = count = out  # unused when there is one split
    fused = opts.get("combine", "fused") == "fused"
    if splits > 1:
        part = torch.empty((b * kvh * splits * rows, block_d), device=q.device, dtype=torch.float32)
        lse = torch.empty((b * kvh * splits * rows,), device=q.device, dtype=torch.float32)
        count = _counters(q.device, b * kvh) if fused else out
    compiled = _decode_split_kernel[(b * kvh, splits)](
        q, k_cache, v_cache, block_table, seq_lens, out, part, lse, count,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        out.stride(0), out.stride(1), out.stride(2),
        kvh, page_size, chunk, splits, scale * _LOG2E,
        GROUP=group, LQ=lq, M=rows, HEAD_DIM=dim, BLOCK_D=block_d, BLOCK_N=block_n, SPLIT=splits > 1,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", FUSED=fused,
        num_warps=int(opts["num_warps"]), num_stages=int(opts["num_stages"]),
    )  # fmt: skip
    if config not in _SLOTS and q.is_cuda and hasattr(compiled, "metadata"):
        _SLOTS[config] = resident_programs(compiled, int(opts["num_warps"]), q.device)[0]
    if splits > 1 and not fused:
        _decode_combine_kernel[(b * kvh, group * lq)](
            part, lse, out, out.stride(0), out.stride(1), out.stride(2), kvh, splits,
            GROUP=group, M=rows, HEAD_DIM=dim, BLOCK_D=block_d, BLOCK_S=triton.next_power_of_2(splits), num_warps=4,
        )  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------- custom op
def _decode_op(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor,
    block_table: torch.Tensor | None, scale: float, max_seq_len: int, options_text: str | None,
) -> torch.Tensor:  # fmt: skip
    return decode_attention_forward(q, k_cache, v_cache, seq_lens, block_table, scale, max_seq_len or None,
                                    options(options_text))  # fmt: skip


def _decode_fake(q, k_cache, v_cache, seq_lens, block_table, scale, max_seq_len, options_text):
    return q.new_empty(q.shape)


DECODE_ATTENTION = KernelOp("decode_attention", _decode_op, _decode_fake)


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    max_seq_len: int | None = None,
    options: dict | None = None,
) -> torch.Tensor:
    """Attention of ``q`` ``[b, l, heads, d]`` (the ``l`` newest tokens of each sequence) over its KV cache, contiguous
    (``k_cache`` ``[b, capacity, kv_heads, d]``) or paged (``[num_blocks, block_size, kv_heads, d]`` with
    ``block_table`` ``[b, max_blocks]``); ``seq_lens`` ``[b]`` counts each sequence's cached tokens, the new ones
    included. The op ``solkit::decode_attention`` (inference: no gradient)."""
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return DECODE_ATTENTION(q, k_cache, v_cache, seq_lens, block_table, scale, int(max_seq_len or 0),
                            options_json(options))  # fmt: skip
