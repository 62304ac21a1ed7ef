"""Row softmax forward for vocabulary-wide 16-bit rows: the packed path's exchange with TMA-staged chunks.

Math and exchange as :mod:`solkit.kernels.softmax.packed` (chunk ``c`` of a row: ``m_c = max x``, ``s_c = sum
2^((x - m_c) L)``, published as tagged words; ``M = max m_i``, ``S = sum s_i 2^((m_i - M) L)``; ``y = e_c
2^((m_c - M) L) / S`` from pass 1's exponentials kept as bf16 / f16 pairs). The difference is where the rows in
flight wait: the row of ``N`` columns is viewed as ``[N / 256, 128]`` int32 words and a program's chunk is one
``[1, BR, 128]`` TMA box (``BR`` 128-word blocks; chunks are whole blocks, the last chunk of a row may be
short, its missing blocks masked), loaded through a device-side tensor descriptor inside ``tl.range(...,
num_stages=STAGES)``, so Triton's pipeliner keeps ``STAGES - 1`` chunks in flight in **shared memory** rather
than in registers: the registers hold one chunk being reduced and one row's exponentials waiting for the
exchange. Pass 2 runs one row behind pass 1 (publish row ``r``, then wait for row ``r - G`` and finish it).

Bytes per call, ``M x N`` of ``e`` bytes: read ``M N e``, write ``M N e``; the partials stay in L2.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, device_caps
from solkit.kernels.common.device import interpreting, sm_count, use_descriptor_scratch
from solkit.kernels.common.exchange import (
    L2E,
    await_max_sum,
    bulk_prefetch_ok,
    fast_log2,
    pack,
    per_sm_for,
    prefetch_rows,
    resident_programs,
    resident_regs,
    tagged_slots,
    unpack,
)
from solkit.kernels.common.spin import poll_tagged, publish_tagged, tags_match, untag
from solkit.kernels.softmax.streaming import online_max_sum

_TUNED = tuned.load("softmax", "tma")
#: Launch defaults (``configs.yaml``, entry ``tma``): 128-word blocks per chunk (16: 4096 columns), warps, programs
#: per SM, pipeline stages, store hint.
TMA_CONFIG = _TUNED["config"]
#: When no path is asked for: the TMA forward on a GPU for 16-bit rows whose width lies in one of ``ranges``
#: ``(min_cols, max_cols, options)`` (and is a multiple of 256; else the next path).
TMA_DEFAULT: dict = {"ranges": _TUNED["ranges"]}


def tma_smem_bytes(blocks: int, stages: int) -> int:
    """Shared memory of one program's staged chunks: ``stages`` TMA boxes of ``blocks`` 128-word blocks."""
    return stages * blocks * 512


@functools.cache
def _measured(cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(_TUNED, cc)[1]


def tma_per_sm(caps: DeviceCaps, per_sm: int, num_warps: int, blocks: int, stages: int) -> int:
    """Programs per SM: the tuned ``per_sm`` where measured, else derived from ``caps``' registers and shared memory
    (:func:`~solkit.kernels.common.exchange.per_sm_for`)."""
    return per_sm_for(caps, _measured(caps.cc), per_sm, num_warps, tma_smem_bytes(blocks, stages))


@triton.jit
def _spin_words(base, j, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr):
    """Wait for arrival ``j``'s ``(max, sum)`` words of the group (at most ``spin_budget`` re-reads per lane) and
    return the row's (max M, sum of 2^((x - M) L), 1 if all arrived else 0). The re-read loop is PTX inside one
    inline-asm block (a loop per lane), not a ``while`` in Triton: a nested loop stops Triton's pipeliner from
    staging the TMA loads of the enclosing row loop."""
    want = tl.cast(j + 1, tl.int64)
    offs = tl.arange(0, SPLIT_P2)
    lane = tl.where(offs < SPLIT, offs, 0)  # lanes past SPLIT poll lane 0 and are replaced below
    wm, ws = tl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .b32 l0, h0, l1, h1, n; mov.u32 n, 0; "
        "SPIN: ld.volatile.global.b64 $0, [$2]; ld.volatile.global.b64 $1, [$3]; "
        "mov.b64 {l0, h0}, $0; mov.b64 {l1, h1}, $1; setp.eq.u32 p, h0, $4; setp.eq.and.u32 p, h1, $4, p; "
        "@p bra DONE; add.u32 n, n, 1; setp.lt.u32 q, n, $5; @q bra SPIN; DONE: }",
        "=l,=l,l,l,r,r",
        [base + lane, base + SPLIT_P2 + lane, tl.full([SPLIT_P2], 0, tl.int32) + want.to(tl.int32),
         tl.full([SPLIT_P2], 0, tl.int32) + spin_budget],
        dtype=(tl.int64, tl.int64), is_pure=False, pack=1,
    )  # fmt: skip
    tag = want << 32
    wm = tl.where(offs < SPLIT, wm, tag | 0xFF800000)
    ws = tl.where(offs < SPLIT, ws, tag)
    ready = tags_match(wm, ws, ws, want)
    ms = untag(wm)
    big = tl.max(ms, axis=0)
    return big, tl.sum(untag(ws) * tl.exp(ms - big), axis=0), ready


@triton.jit
def _tag3(j):
    """The one-word exchange's tag of arrival ``j``: ``((j >> 3) + 1) & 7``. Slot ``j & 7`` holds arrival ``j`` or a
    stale ``j - 8`` (a partner is never 8 arrivals behind), whose tag differs; never 0 (the zeroed buffer) for the
    first 56 arrivals, and by then every slot has been written."""
    return ((j >> 3) + 1) & 7


@triton.jit
def _publish_word(base, chunk, j, m_c, s_c):
    """Publish arrival ``j``'s ``(max, sum)`` of this chunk as ONE 64-bit word (one relaxed atomic exchange): the max's
    fp32 bits high, the sum's low with its 3 low mantissa bits replaced by :func:`_tag3` (a relative change of the
    sum below 2^-20; the sum of a chunk of padding, 0, reads back as 0)."""
    lo = (s_c.to(tl.int32, bitcast=True) & -8) | _tag3(j)
    word = (m_c.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (lo.to(tl.int64) & 0xFFFFFFFF)
    tl.atomic_xchg(base + chunk, word, sem="relaxed")


@triton.jit
def _word_stats(w, want3, offs, SPLIT: tl.constexpr):
    """(M, S, 1 if every tag is ``want3``) of the group's one-word partials (lanes past ``SPLIT``: -inf, 0)."""
    lo = (w & 0xFFFFFFFF).to(tl.int32)
    ok = ((lo & 7) == want3) | (offs >= SPLIT)
    ms = tl.where(offs < SPLIT, (w >> 32).to(tl.int32).to(tl.float32, bitcast=True), -float("inf"))
    ss = tl.where(offs < SPLIT, (lo & -8).to(tl.float32, bitcast=True), 0.0)
    big = tl.max(ms, axis=0)
    return big, tl.sum(ss * tl.exp(ms - big), axis=0), tl.min(ok.to(tl.int32), axis=0)


@triton.jit
def _spin_word(base, j, spin_budget, SPLIT: tl.constexpr, NL: tl.constexpr, BACKOFF: tl.constexpr):
    """:func:`_spin_words` for the one-word partials (:func:`_publish_word`): one 8-byte poll per lane and spin,
    with a ``nanosleep`` of ``BACKOFF`` ns after a failed poll (0: none) so waiting lanes load the L2 less. ``NL``
    lanes (a power of 2 >= SPLIT): lanes past ``SPLIT`` do not poll, so with ``NL`` = the program's threads each
    partner's word is polled by one thread, not once per warp (a vector shorter than the threads is replicated)."""
    offs = tl.arange(0, NL)
    lane = tl.where(offs < SPLIT, offs, 0)
    want3 = _tag3(j)
    sleep: tl.constexpr = f"nanosleep.u32 {BACKOFF}; " if BACKOFF > 0 else ""
    w = tl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .b32 l0, h0, n; mov.u32 n, 0; mov.b64 $0, 0; setp.eq.u32 p, $4, 0; @p bra DONE; "
        "SPIN: ld.volatile.global.b64 $0, [$1]; mov.b64 {l0, h0}, $0; and.b32 l0, l0, 7; setp.eq.u32 p, l0, $2; "
        "@p bra DONE; " + sleep + "add.u32 n, n, 1; setp.lt.u32 q, n, $3; @q bra SPIN; DONE: }",
        "=l,l,r,r,r",
        [base + lane, tl.full([NL], 0, tl.int32) + want3, tl.full([NL], 0, tl.int32) + spin_budget,
         (offs < SPLIT).to(tl.int32)],
        dtype=tl.int64, is_pure=False, pack=1,
    )  # fmt: skip
    return _word_stats(w, want3, offs, SPLIT)


@triton.jit
def row_stats(x_ptr, row, x_stride, n_cols, base, j, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
               ASM: tl.constexpr, FALLBACK: tl.constexpr, WORD1: tl.constexpr = 0,
               BACKOFF: tl.constexpr = 0):  # fmt: skip
    """The row's (M, S) from the group's words of arrival ``j`` (on a GPU the PTX spin of :func:`_spin_words`, or
    :func:`_spin_word` for the one-word partials, ``WORD1``; under the interpreter one read), and the spin budget
    left: on a timeout the whole row's statistics (``FALLBACK``: the interpreter, whose programs run one after
    another) or NaN, and no waiting from then on."""
    if WORD1:
        if ASM:
            big, total, ok = _spin_word(base, j, spin_budget, SPLIT, max(SPLIT_P2, WORD1), BACKOFF)
        else:
            offs = tl.arange(0, SPLIT_P2)
            w = tl.load(base + offs, mask=offs < SPLIT, other=0, volatile=True)
            big, total, ok = _word_stats(w, _tag3(j), offs, SPLIT)
    elif ASM:
        big, total, ok = _spin_words(base, j, spin_budget, SPLIT, SPLIT_P2)
    else:
        wm, ws, _wz = poll_tagged(base, j, SPLIT, SPLIT_P2, False)
        big, total, ok = await_max_sum(base, j, wm, ws, 0, SPLIT, SPLIT_P2)
    if ok == 0:
        if FALLBACK:
            big, total = online_max_sum(x_ptr + tl.cast(row, tl.int64) * x_stride, 0, n_cols, 1024, "", False)
        else:
            big = big + float("nan")
        spin_budget = 0
    return big, total, spin_budget


@triton.jit
def publish_stats(base, chunk, j, m_c, s_c, SPLIT_P2: tl.constexpr, WORD1: tl.constexpr):
    """Arrival ``j``'s ``(max, sum)``: one word (``WORD1``, :func:`_publish_word`) or two tagged words."""
    if WORD1:
        _publish_word(base, chunk, j, m_c, s_c)
    else:
        publish_tagged(base, chunk, j, m_c, s_c, 0.0, SPLIT_P2, False)


@triton.jit
def tma_pass1(w, E_BF16: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr):
    lo, hi = unpack(w, IS_BF16)
    m_c = tl.max(tl.max(tl.maximum(lo, hi), axis=1), axis=0)
    m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
    e_lo = tl.exp2(lo * L2E - m_ref * L2E)
    e_hi = tl.exp2(hi * L2E - m_ref * L2E)
    s_c = tl.sum(tl.sum(e_lo + e_hi, axis=1), axis=0)
    return m_c, m_ref, s_c, pack(e_lo, e_hi, E_BF16, ASM)


@triton.jit
def _tma_pass2(e, m_ref, big, total, IS_BF16: tl.constexpr, E_BF16: tl.constexpr, ASM: tl.constexpr):
    c = tl.exp2(m_ref * L2E - big * L2E - fast_log2(total, ASM))
    if E_BF16 and ASM:
        cw = tl.broadcast_to(pack(c, c, True, ASM), e.shape)
        zw = tl.full(e.shape, -2147450880, tl.int32)  # (-0.0, -0.0): e * c + (-0) = e * c
        return tl.inline_asm_elementwise("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r", [e, cw, zw], dtype=tl.int32,
                                         is_pure=True, pack=1)  # fmt: skip
    else:
        e_lo, e_hi = unpack(e, E_BF16)
        return pack(e_lo * c, e_hi * c, IS_BF16, ASM)


@triton.jit
def _finish(yu_ptr, row, n_rows, y_stride, e, m_ref, big, total, u_offs, u_mask, IS_BF16: tl.constexpr,
            E_BF16: tl.constexpr, ASM: tl.constexpr, HINT: tl.constexpr):  # fmt: skip
    y = _tma_pass2(e, m_ref, big, total, IS_BF16, E_BF16, ASM).to(yu_ptr.dtype.element_ty)
    ptrs = yu_ptr + tl.cast(row, tl.int64) * y_stride + u_offs
    mask = u_mask & ((u_offs * 0 + row) < n_rows)  # (a vector condition: the interpreter needs one)
    if HINT >= 1:
        tl.store(ptrs, y, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptrs, y, mask=mask)


@triton.jit
def _softmax_fwd_tma_kernel(
    x_ptr, xu_ptr, yu_ptr, partial_ptr, n_rows, n_blocks, x_stride, y_stride, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BR: tl.constexpr, IS_BF16: tl.constexpr, E_BF16: tl.constexpr,
    ASM: tl.constexpr, STAGES: tl.constexpr, HINT: tl.constexpr, FALLBACK: tl.constexpr = 0, PF: tl.constexpr = 0,
    NB_STATIC: tl.constexpr = 0, WORD1: tl.constexpr = 0, BACKOFF: tl.constexpr = 0,
):  # fmt: skip
    PAD: tl.constexpr = -8323200 if IS_BF16 else -67044352  # two -inf per word
    if NB_STATIC > 0:  # the width as a compile-time constant (see softmax_forward_tma's static_width)
        n_blocks = NB_STATIC
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    b0 = chunk * BR
    desc = tl.make_tensor_descriptor(xu_ptr, shape=[n_rows, n_blocks, 128], strides=[x_stride, 128, 1],
                                     block_shape=[1, BR, 128])  # fmt: skip
    blk = tl.arange(0, BR)[:, None]
    valid = (b0 + blk) < n_blocks
    u_offs = (b0 + blk) * 128 + tl.arange(0, 128)[None, :]
    u_mask = valid & (tl.arange(0, 128)[None, :] >= 0)
    gbase = partial_ptr + group * (3 * SPLIT_P2)
    slot_stride = n_groups * (3 * SPLIT_P2)
    spin_budget = max_spins
    # Row `group` (arrival 0) outside the pipelined loop: the loop then always has a previous row to finish.
    w = tl.where(valid, tl.reshape(desc.load([group, b0, 0]), [BR, 128]), PAD)
    m_c, m_p, s_c, e_p = tma_pass1(w, E_BF16, IS_BF16, ASM)
    publish_stats(gbase, chunk, 0, m_c, s_c, SPLIT_P2, WORD1)
    pf_bytes = tl.minimum(n_blocks - b0, BR) * 512  # (the chunk's words, contiguous: 16-byte multiple)
    if PF > 0:  # rows past the pipeline's TMA loads on their way to L2
        prefetch_rows(xu_ptr, group + STAGES * n_groups, PF, n_groups, n_rows, x_stride, b0 * 128, pf_bytes)
    j = 1
    for row in tl.range(group + n_groups, n_rows, n_groups, num_stages=STAGES):
        if PF > 0:
            prefetch_rows(xu_ptr, row + (STAGES - 1 + PF) * n_groups, 1, n_groups, n_rows, x_stride, b0 * 128,
                           pf_bytes)  # fmt: skip
        w = tl.where(valid, tl.reshape(desc.load([row, b0, 0]), [BR, 128]), PAD)
        m_c, m_n, s_c, e_n = tma_pass1(w, E_BF16, IS_BF16, ASM)
        publish_stats(gbase + (j & 7) * slot_stride, chunk, j, m_c, s_c, SPLIT_P2, WORD1)
        big, total, spin_budget = row_stats(x_ptr, row - n_groups, 2 * x_stride, 256 * n_blocks,
                                             gbase + ((j - 1) & 7) * slot_stride, j - 1, spin_budget, SPLIT,
                                             SPLIT_P2, ASM, FALLBACK, WORD1, BACKOFF)  # fmt: skip
        _finish(yu_ptr, row - n_groups, n_rows, y_stride, e_p, m_p, big, total, u_offs, u_mask, IS_BF16, E_BF16, ASM,
                HINT)  # fmt: skip
        e_p = e_n
        m_p = m_n
        j += 1  # noqa: SIM113 (a Triton loop-carried scalar)
    last = group + (j - 1) * n_groups
    big, total, spin_budget = row_stats(x_ptr, last, 2 * x_stride, 256 * n_blocks,
                                         gbase + ((j - 1) & 7) * slot_stride, j - 1, spin_budget, SPLIT, SPLIT_P2,
                                         ASM, FALLBACK, WORD1, BACKOFF)  # fmt: skip
    _finish(yu_ptr, last, n_rows, y_stride, e_p, m_p, big, total, u_offs, u_mask, IS_BF16,
            E_BF16, ASM, HINT)  # fmt: skip


_CAPACITY: dict = {}


def softmax_forward_tma(
    x: torch.Tensor, y: torch.Tensor, *, blocks: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, stages: int | None = None, hint: int | None = None, keep_e: int = 2,
    max_spins: int = 1 << 20, maxnreg: int | None = None, groups: int | None = None, l2_prefetch: int = 0,
    static_width: bool = True, word1: int = 0, backoff: int = 0,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over rows of the 2-D 16-bit ``x``, or None (nothing launched) when the rows do not fit
    the TMA view (width a multiple of 256, 16-byte aligned rows) or one group cannot be resident. Under the
    interpreter (``groups`` groups, default 2) a program whose partners have not run computes the row's
    statistics itself. ``static_width`` compiles the width in (one kernel per width): with the width a runtime
    argument that Triton cannot specialise (128256 columns: 501 blocks, not a multiple of 16) ptxas spills 4-24
    bytes in these kernels with Triton 3.6, and such kernels ran erratically slowly on the H200.
    ``word1``: the partials as one 64-bit word per chunk (:func:`_publish_word`: half the polls' and publications'
    L2 traffic; 2: also each word polled by one thread, not once per warp); ``backoff``: ns of ``nanosleep`` after a
    failed poll (with ``word1``)."""
    if x.dtype not in (torch.bfloat16, torch.float16) or y.dtype != x.dtype:
        return None
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols % 256 or any(t.stride(1) != 1 or t.stride(0) % 8 or t.data_ptr() % 16 for t in (x, y)):
        return None
    interp = not x.is_cuda or interpreting()
    caps = device_caps(x)
    cfg = TMA_CONFIG
    br = blocks or cfg["blocks"]
    nw = num_warps or cfg["num_warps"]
    stages = int(stages or cfg["stages"])
    per_sm = per_sm or tma_per_sm(caps, cfg["per_sm"], nw, br, stages)
    n_blocks = n_cols // 256
    split = triton.cdiv(n_blocks, br)
    is_bf16 = x.dtype == torch.bfloat16
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BR=br, IS_BF16=int(is_bf16),
                E_BF16=int(keep_e == 2 and is_bf16), ASM=int(not interp), STAGES=stages,
                HINT=int(cfg["hint"] if hint is None else hint), FALLBACK=int(interp),
                PF=0 if interp or not bulk_prefetch_ok(caps) else int(l2_prefetch),
                NB_STATIC=n_blocks if static_width else 0, num_warps=nw)  # fmt: skip
    meta.update(word_meta(word1, backoff, nw))
    launched = launch_grouped(_softmax_fwd_tma_kernel, x, y, meta, split, per_sm, nw, groups, max_spins, maxnreg)
    return None if launched is None else {"path": "tma", **launched}


def word_meta(word1: int, backoff: int, num_warps: int) -> dict:
    """The constexprs of the one-word exchange: ``WORD1`` = the poll vector's length (1: the partials' lanes, as
    the two-word form; 2: one lane per thread), ``BACKOFF``; none when off (the default kernel unchanged)."""
    meta = {"WORD1": 1 if word1 == 1 else 32 * num_warps} if word1 else {}
    return {**meta, "BACKOFF": int(backoff)} if word1 and backoff else meta


def launch_grouped(kernel, x: torch.Tensor, y: torch.Tensor, meta: dict, split: int, per_sm: int, nw: int,
                   groups: int | None, max_spins: int, maxnreg: int | None) -> dict | None:  # fmt: skip
    """Launch a grouped forward kernel (``kernel(x, x words, y words, partials, n_rows, n_blocks, x word stride,
    y word stride, max_spins, **meta)``) on as many groups of ``split`` programs as are resident at once (the
    compiled kernel's registers and shared memory decide, cached per configuration), at most ``per_sm`` programs
    an SM; under the interpreter ``groups`` groups (default 2). None when one group cannot be resident."""
    n_rows, n_cols = x.shape
    interp = not x.is_cuda or interpreting()
    use_descriptor_scratch()
    if interp:
        n_groups = min(n_rows, groups or 2)
    else:
        meta = {**meta, "maxnreg": maxnreg or resident_regs(per_sm, nw, device_caps(x).regs_per_sm)}
        n_groups = min(n_rows, groups or n_rows, per_sm * sm_count(x) // split)
    partials = tagged_slots(max(n_groups, 1), split, 3, x.device)
    args = [x, x.view(torch.int32), y.view(torch.int32), partials, n_rows, n_cols // 256, x.stride(0) // 2,
            y.stride(0) // 2, 0 if interp else max_spins]  # fmt: skip
    occ: dict = {}
    if not interp:
        key = (id(kernel), x.device.index, x.dtype, tuple(sorted(meta.items())))
        if key not in _CAPACITY:  # compile (no launch): the whole grid must be resident at once
            _CAPACITY[key] = resident_programs(kernel.warmup(*args, grid=(1,), **meta), nw, x.device)
        capacity, occ = _CAPACITY[key]
        n_groups = min(n_groups, capacity // split)
    if n_groups < 1:
        return None
    kernel[(n_groups * split,)](*args, **meta)
    return {"split": split, "groups": n_groups, **occ}
