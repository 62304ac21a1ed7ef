"""Row softmax for vocabulary-wide rows, forward and backward, with one DRAM read: register-held row chunks.

The design of the packed cross-entropy kernel (:mod:`solkit.kernels.cross_entropy.packed`), whose traffic (one read of
the row, one write) is a softmax forward's: the row of ``N`` columns is cut into ``SPLIT`` chunks of at most
``BLOCK`` columns; ``G`` groups of ``SPLIT`` resident programs walk rows ``g, g + G, ...``; a program keeps its
chunk **in registers** while the row's statistics are exchanged with its ``SPLIT - 1`` partners, so the row is
read from DRAM once and never re-read.

Forward, chunk ``c`` of row ``x`` (fp32 math, base-2 exponentials, ``L = log2 e``):

* pass 1: ``m_c = max x``, ``s_c = sum 2^((x - m_c) L)``; publish ``(m_c, s_c)``;
* exchange: ``M = max m_i``, ``S = sum_i s_i 2^((m_i - M) L)``;
* pass 2: ``y = 2^(x L - lse_2)``, ``lse_2 = M L + log2 S`` (``lg2.approx`` on a GPU), recomputed from the
  chunk's 16-bit inputs kept as loaded (``KEEP_E = 0``), or ``y = e 2^(m_c L - lse_2)`` from pass 1's
  exponentials kept as f16 pairs (``KEEP_E = 1``: one FMUL per element instead of FFMA + EX2, relative error
  2^-12 more); fp32 inputs ``y = 2^((x - M) L) / S`` (the exact difference first).

Backward: pass 1 ``d_c = sum y dy`` over the chunk (``y`` and ``dy`` kept as loaded), publish ``d_c``;
``d = sum_i d_i``; pass 2 ``dx = y (dy - d)``.

Bytes per call, ``M x N`` of ``e`` bytes: forward ``2 M N e`` (read x, write y), backward ``3 M N e`` (read
y and dy, write dx); the partials (``16 SPLIT`` bytes per row) stay in L2.

Pipeline (per program, iteration of row ``r``; rows ``r + G``, ``r + 2G`` already in flight): issue the load
of row ``r + 3G`` (``EARLY_LOAD``; else after pass 1), first poll of row ``r``'s partials, pass 1 of row
``r + G`` and its publication, wait for row ``r``, pass 2 of row ``r`` and its store. ``PF`` = d > 0: the
chunk of row ``r + (3 + d) G`` is bulk-prefetched into L2 (``cp.async.bulk.prefetch.L2``) when row
``r + 3G``'s register load is issued. Forward options: ``DEPTH = 3``, one more row in registers (rows up to
``r + 3G`` in flight, ``r + 4G`` issued); ``SKEW = 2``, pass 1 and the publication two rows ahead of pass 2
(two rows wait for their partners at any time; 8 partial slots). ``HINT``: 1 streaming stores (``.cs``), 2
also ``evict_first`` loads. A row of one chunk (``SPLIT = 1``) is finished without any exchange. 16-bit
inputs of even width and row stride are read as int32 pairs (``PACKED``); other inputs (fp32, odd widths)
one element per lane, in chunks of half the columns (the same registers per chunk).

Exchange: the tagged words of :mod:`solkit.kernels.common.spin` (``(j + 1) << 32 | fp32 bits``,
relaxed atomic exchange; a program publishes row ``j + 1`` (``j + 2`` with ``SKEW = 2``) before it waits for
row ``j``: eight slots in the forward, four in the backward). Every
row is an arrival. The spin is bounded (``max_spins``); on a timeout a program either computes the row's
statistics from the whole row itself (``FALLBACK``: correct, slow; the CPU interpreter, whose programs run
one after another, takes this branch) or writes NaN for that row and never waits again (a visible failure,
never a hang). All programs of the grid must be resident at once: the launcher sizes the grid from the
compiled kernel's registers (:func:`~solkit.kernels.cross_entropy.split.resident_programs`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.spin import _poll_tagged, _poll_words, _publish_tagged, _spin_until_tagged, _tagged, _untag
from solkit.kernels.common.tuned import for_width as config_for_width
from solkit.kernels.cross_entropy.packed import _pass1_packed, _pass2_packed, _prefetch_rows
from solkit.kernels.cross_entropy.split import L2E, LN2, _pack, _pair_sums, _unpack, chunk_layout, resident_programs
from solkit.kernels.softmax.split import _dot_range, _online_max_sum

#: Launch defaults (``block``: widest chunk per program; ``per_sm``: resident programs per SM; ``keep_e``: pass 1's
#: exponentials kept, 1 as f16 pairs, 2 as bf16 pairs for bf16 inputs; ``hint``: 1 streaming stores, 2 also
#: ``evict_first`` loads); ``by_width``: keys that change for rows at least ``W`` wide (padded to a power of 2).
#: H200 (session 5, bf16), 8192 x 128256: forward bf16 exponentials + hint 2 1140.1 us, f16 exponentials + hint 2
#: 1155.6 (round 3), recomputed exponentials 1257.9 (round 1); backward with the next row's load after pass 1
#: 1572.6 against 1668.5 before it. 1024 x 262144 forward: 8192-column chunks, 8 warps, 2 per SM 311.1 us
#: against 322.7 (round 2; docs/kernels/norms.md). Session 6: the 262144-wide backward with the chunk count
#: filling every resident slot (``fill``: 132 chunks x 4 groups) 404.5-405.9 us against 438.4-439.6.
PACKED_CONFIG = {
    "fwd": {"block": 4096, "num_warps": 4, "per_sm": 4, "keep_e": 2, "early_load": 1, "l2_prefetch": 1, "hint": 2,
            "by_width": {262144: {"block": 8192, "num_warps": 8, "per_sm": 2}}},
    "bwd": {"block": 2048, "num_warps": 4, "per_sm": 4, "early_load": 0, "l2_prefetch": 1, "hint": 0,
            "by_width": {262144: {"fill": 1}}},
}  # fmt: skip


@triton.jit
def _load_units(u_ptr, row, n_rows, u_stride, ucols, uoffs, u_lim, PAD, HINT: tl.constexpr = 0):
    """A row's chunk in load units (int32 words of two 16-bit values, or elements); ``PAD`` past the row's
    end and for rows past the last. ``HINT`` 2: ``evict_first`` (every byte is read once)."""
    ptrs = u_ptr + tl.cast(row, tl.int64) * u_stride + ucols
    mask = uoffs < tl.where(row < n_rows, u_lim, 0)
    if HINT >= 2:
        return tl.load(ptrs, mask=mask, other=PAD, eviction_policy="evict_first")
    else:
        return tl.load(ptrs, mask=mask, other=PAD)


@triton.jit
def _store_units(ptrs, v, mask, HINT: tl.constexpr):
    """``HINT`` >= 1: streaming stores (``.cs``: the written lines leave L2 first)."""
    if HINT >= 1:
        tl.store(ptrs, v, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptrs, v, mask=mask)


@triton.jit
def _fwd_pass1(u, PACKED: tl.constexpr, IS_BF16: tl.constexpr, KEEP_E: tl.constexpr, ASM: tl.constexpr):
    """(max, m_ref, sum 2^((x - m_ref) L), what pass 2 keeps) of a chunk; m_ref = max, or 0 for a chunk
    of padding only. Kept: the loaded units, or the exponentials (``KEEP_E`` 1: f16 pairs when packed, 2: bf16
    pairs for bf16 inputs: the cross-entropy kernel's :func:`~solkit.kernels.cross_entropy.packed._pass1_packed`)."""
    E_BF16: tl.constexpr = (KEEP_E == 2) and IS_BF16
    if PACKED:
        if KEEP_E:
            m_c, m_ref, s_c, _sz, kept = _pass1_packed(u, u != 0, IS_BF16, False, E_BF16, ASM)
        else:
            m_c, s_c, _sz = _pair_sums(u, u != 0, IS_BF16, False)
            m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
            kept = u
    else:
        z = u.to(tl.float32)
        m_c = tl.max(z, axis=0)
        m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
        e = tl.exp(z - m_ref)  # (the exact difference first: fp32 inputs keep torch's accuracy)
        s_c = tl.sum(e, axis=0)
        if KEEP_E:
            kept = e
        else:
            kept = u
    return m_c, m_ref, s_c, kept


@triton.jit
def _log2(v, ASM: tl.constexpr):
    if ASM:  # one MUFU.LG2 (relative error ~2^-22) instead of the ~25-instruction precise log2
        return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [v], dtype=tl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    return tl.log2(v)


@triton.jit
def _fwd_pass2(kept, m_ref, big, total, PACKED: tl.constexpr, IS_BF16: tl.constexpr, KEEP_E: tl.constexpr,
               ASM: tl.constexpr):  # fmt: skip
    """The chunk's outputs from the row's ``(max, sum)``: packed words (16-bit, ``y = 2^(x L - lse_2)`` with
    ``lse_2 = M L + log2 S``: one FFMA and one EX2 per element), else fp32 ``exp(x - M) / S`` (the exact
    difference first: fp32 inputs keep torch's accuracy)."""
    if PACKED:
        E_BF16: tl.constexpr = (KEEP_E == 2) and IS_BF16
        lse2 = big * L2E + _log2(total, ASM)
        if E_BF16:  # one fma.rn.bf16x2 per pair (three bf16 roundings per value)
            return _pass2_packed(kept, m_ref, lse2 * LN2, 1.0, tl.zeros([], dtype=tl.float32), IS_BF16, True, ASM)
        elif KEEP_E:
            c = tl.exp2(m_ref * L2E - lse2)
            e_lo, e_hi = _unpack(kept, False)
            return _pack(e_lo * c, e_hi * c, IS_BF16, ASM)
        else:
            lo, hi = _unpack(kept, IS_BF16)
            return _pack(tl.exp2(lo * L2E - lse2), tl.exp2(hi * L2E - lse2), IS_BF16, ASM)
    else:
        inv = 1.0 / total
        if KEEP_E:
            return kept * (tl.exp(m_ref - big) * inv)
        else:
            return tl.exp(kept.to(tl.float32) - big) * inv


@triton.jit
def _await_stats(base, j, wm, ws, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr):
    """From a first read (``wm, ws``) re-read the group's words of arrival ``j`` until every tag matches (at
    most ``spin_budget`` times: :func:`~solkit.kernels.common.spin._spin_until_tagged`); returns the row's (max M, sum
    of 2^((x - M) L), 1 if all arrived else 0)."""
    wm, ws, _ws, ready = _spin_until_tagged(base, j, wm, ws, ws, spin_budget, SPLIT, SPLIT_P2, 2)
    ms = _untag(wm)
    big = tl.max(ms, axis=0)
    return big, tl.sum(_untag(ws) * tl.exp(ms - big), axis=0), ready


@triton.jit
def _chunk_geometry(n_cols, chunk_cols, SPLIT: tl.constexpr, UBLOCK: tl.constexpr, PACKED: tl.constexpr):
    """The program's group and chunk, its first column, its columns in load units and their count."""
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    col0 = chunk * chunk_cols
    col_lim = tl.maximum(tl.minimum(chunk_cols, n_cols - col0), 0)
    uoffs = tl.arange(0, UBLOCK)
    if PACKED:
        u0 = col0 // 2
        u_lim = col_lim // 2
    else:
        u0 = col0
        u_lim = col_lim
    return n_groups, group, chunk, u0, uoffs, u0 + uoffs, u_lim


@triton.jit
def _softmax_fwd_packed_kernel(
    x_ptr, xu_ptr, yu_ptr, partial_ptr, n_rows, n_cols, chunk_cols, x_stride, xu_stride, yu_stride,
    max_spins, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr, PACKED: tl.constexpr,
    IS_BF16: tl.constexpr, KEEP_E: tl.constexpr, EARLY_LOAD: tl.constexpr, PF: tl.constexpr,
    FALLBACK: tl.constexpr, ASM: tl.constexpr, DEPTH: tl.constexpr = 2, SKEW: tl.constexpr = 1,
    HINT: tl.constexpr = 0,
):  # fmt: skip
    UBLOCK: tl.constexpr = BLOCK // 2 if PACKED else BLOCK
    PAD: tl.constexpr = (-8323200 if IS_BF16 else -67044352) if PACKED else float("-inf")  # two -inf per word
    AHEAD: tl.constexpr = SKEW + DEPTH  # rows from the one finished to the one whose load is issued
    n_groups, group, chunk, u0, uoffs, ucols, u_lim = _chunk_geometry(n_cols, chunk_cols, SPLIT, UBLOCK, PACKED)
    u_mask = uoffs < u_lim
    spin_budget = max_spins
    gbase = partial_ptr + group * (3 * SPLIT_P2)
    slot_stride = n_groups * (3 * SPLIT_P2)  # 8 slots: a skew s needs 2 s + 2 (cross_entropy_split docstring)
    pf_bytes = u_lim * 4 // 16 * 16  # (an fp32 element or a word of two 16-bit ones: 4 bytes)
    x0 = _load_units(xu_ptr, group, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    x1 = _load_units(xu_ptr, group + n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    x2 = _load_units(xu_ptr, group + 2 * n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    if AHEAD == 4:
        x3 = _load_units(xu_ptr, group + 3 * n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    if PF > 0:  # the PF rows after the register loads on their way to L2 (the loop keeps them PF rows ahead)
        _prefetch_rows(xu_ptr, group + AHEAD * n_groups, PF, n_groups, n_rows, xu_stride, u0, pf_bytes)
    m_c, m0, s0, k0 = _fwd_pass1(x0, PACKED, IS_BF16, KEEP_E, ASM)
    if SPLIT > 1:
        _publish_tagged(gbase, chunk, 0, m_c, s0, 0.0, SPLIT_P2, False)
    if SKEW == 2:  # row r + G passed pass 1 too: two rows wait for their partners at any time
        m_c, m1, s1, k1 = _fwd_pass1(x1, PACKED, IS_BF16, KEEP_E, ASM)
        if (SPLIT > 1) & (group + n_groups < n_rows):
            _publish_tagged(gbase + slot_stride, chunk, 1, m_c, s1, 0.0, SPLIT_P2, False)
    j = 0
    for row in tl.range(group, n_rows, n_groups):
        rl = row + AHEAD * n_groups
        if EARLY_LOAD:
            xn = _load_units(xu_ptr, rl, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
            if PF > 0:
                _prefetch_rows(xu_ptr, rl + PF * n_groups, 1, n_groups, n_rows, xu_stride, u0, pf_bytes)
        base0 = gbase + (j & 7) * slot_stride
        if SPLIT > 1:
            wm, ws, _wz = _poll_tagged(base0, j, SPLIT, SPLIT_P2, False)
        if SKEW == 2:
            m_c, mp, sp, kp = _fwd_pass1(x2, PACKED, IS_BF16, KEEP_E, ASM)
        else:
            m_c, mp, sp, kp = _fwd_pass1(x1, PACKED, IS_BF16, KEEP_E, ASM)
        if not EARLY_LOAD:
            xn = _load_units(xu_ptr, rl, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
            if PF > 0:
                _prefetch_rows(xu_ptr, rl + PF * n_groups, 1, n_groups, n_rows, xu_stride, u0, pf_bytes)
        if SPLIT == 1:  # the whole row in this program: no exchange
            big = m0
            total = s0
            ok = 1
        else:
            if row + SKEW * n_groups < n_rows:  # (no arrival past the last row: it would take a slot still read)
                _publish_tagged(gbase + ((j + SKEW) & 7) * slot_stride, chunk, j + SKEW, m_c, sp, 0.0, SPLIT_P2,
                                False)  # fmt: skip
            big, total, ok = _await_stats(base0, j, wm, ws, spin_budget, SPLIT, SPLIT_P2)
        if ok == 0:
            if FALLBACK:  # partners not there (the interpreter): the whole row's statistics, here
                big, total = _online_max_sum(x_ptr + tl.cast(row, tl.int64) * x_stride, 0, n_cols, BLOCK, "", False)
            else:  # a visible failure (NaN), never a hang: no more waiting from now on
                big = big + float("nan")
            spin_budget = 0
        _store_units(yu_ptr + tl.cast(row, tl.int64) * yu_stride + ucols,
                     _fwd_pass2(k0, m0, big, total, PACKED, IS_BF16, KEEP_E, ASM).to(yu_ptr.dtype.element_ty), u_mask,
                     HINT)  # fmt: skip
        if SKEW == 2:  # (AHEAD 4: x2, x3 and xn in flight)
            k0 = k1
            m0 = m1
            s0 = s1
            k1 = kp
            m1 = mp
            s1 = sp
            x2 = x3
            x3 = xn
        else:
            k0 = kp
            m0 = mp
            s0 = sp
            x1 = x2
            if AHEAD == 4:
                x2 = x3
                x3 = xn
            else:
                x2 = xn
        j += 1  # noqa: SIM113 (a Triton loop-carried scalar)


@triton.jit
def _publish_one(base, chunk, j, v):
    tl.atomic_xchg(base + chunk, _tagged(v, tl.cast(j + 1, tl.int64) << 32), sem="relaxed")


@triton.jit
def _await_sum(base, j, w, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr):
    """(sum of the arrival's values, 1 if all arrived else 0) from a first read ``w`` (one word per lane)."""
    w, _w1, _w2, ready = _spin_until_tagged(base, j, w, w, w, spin_budget, SPLIT, SPLIT_P2, 1)
    return tl.sum(_untag(w), axis=0), ready


@triton.jit
def _bwd_pass1(yu, du, PACKED: tl.constexpr, IS_BF16: tl.constexpr):
    if PACKED:
        y_lo, y_hi = _unpack(yu, IS_BF16)
        d_lo, d_hi = _unpack(du, IS_BF16)
        return tl.sum(y_lo * d_lo + y_hi * d_hi, axis=0)
    else:
        return tl.sum(yu.to(tl.float32) * du.to(tl.float32), axis=0)


@triton.jit
def _bwd_pass2(yu, du, dot, PACKED: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr):
    if PACKED:
        y_lo, y_hi = _unpack(yu, IS_BF16)
        d_lo, d_hi = _unpack(du, IS_BF16)
        return _pack(y_lo * (d_lo - dot), y_hi * (d_hi - dot), IS_BF16, ASM)
    else:
        return yu.to(tl.float32) * (du.to(tl.float32) - dot)


@triton.jit
def _softmax_bwd_packed_kernel(
    y_ptr, dy_ptr, yu_ptr, du_ptr, dxu_ptr, partial_ptr, n_rows, n_cols, chunk_cols, y_stride, dy_stride,
    yu_stride, du_stride, dxu_stride, max_spins, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr,
    PACKED: tl.constexpr, IS_BF16: tl.constexpr, EARLY_LOAD: tl.constexpr, PF: tl.constexpr,
    FALLBACK: tl.constexpr, ASM: tl.constexpr, HINT: tl.constexpr = 0,
):  # fmt: skip
    UBLOCK: tl.constexpr = BLOCK // 2 if PACKED else BLOCK
    n_groups, group, chunk, u0, uoffs, ucols, u_lim = _chunk_geometry(n_cols, chunk_cols, SPLIT, UBLOCK, PACKED)
    u_mask = uoffs < u_lim
    spin_budget = max_spins
    gbase = partial_ptr + group * SPLIT_P2
    slot_stride = n_groups * SPLIT_P2
    pf_bytes = u_lim * 4 // 16 * 16
    y0 = _load_units(yu_ptr, group, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
    d0 = _load_units(du_ptr, group, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
    y1 = _load_units(yu_ptr, group + n_groups, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
    d1 = _load_units(du_ptr, group + n_groups, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
    y2 = _load_units(yu_ptr, group + 2 * n_groups, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
    d2 = _load_units(du_ptr, group + 2 * n_groups, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
    if PF > 0:
        _prefetch_rows(yu_ptr, group + 3 * n_groups, PF, n_groups, n_rows, yu_stride, u0, pf_bytes)
        _prefetch_rows(du_ptr, group + 3 * n_groups, PF, n_groups, n_rows, du_stride, u0, pf_bytes)
    dot0 = _bwd_pass1(y0, d0, PACKED, IS_BF16)
    if SPLIT > 1:
        _publish_one(gbase, chunk, 0, dot0)
    j = 0
    for row in tl.range(group, n_rows, n_groups):
        r1 = row + n_groups
        r3 = r1 + 2 * n_groups
        if EARLY_LOAD:
            y3 = _load_units(yu_ptr, r3, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
            d3 = _load_units(du_ptr, r3, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
            if PF > 0:
                _prefetch_rows(yu_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, yu_stride, u0, pf_bytes)
                _prefetch_rows(du_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, du_stride, u0, pf_bytes)
        base0 = gbase + (j & 3) * slot_stride
        if SPLIT > 1:
            w, _w1, _w2 = _poll_words(base0, j, SPLIT, SPLIT_P2, 1)
        dot1 = _bwd_pass1(y1, d1, PACKED, IS_BF16)
        if not EARLY_LOAD:
            y3 = _load_units(yu_ptr, r3, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
            d3 = _load_units(du_ptr, r3, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
            if PF > 0:
                _prefetch_rows(yu_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, yu_stride, u0, pf_bytes)
                _prefetch_rows(du_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, du_stride, u0, pf_bytes)
        if SPLIT == 1:  # the whole row in this program: no exchange
            dot = dot0
            ok = 1
        else:
            if r1 < n_rows:
                _publish_one(gbase + ((j + 1) & 3) * slot_stride, chunk, j + 1, dot1)
            dot, ok = _await_sum(base0, j, w, spin_budget, SPLIT, SPLIT_P2)
        if ok == 0:
            if FALLBACK:
                r64 = tl.cast(row, tl.int64)
                dot = _dot_range(y_ptr + r64 * y_stride, dy_ptr + r64 * dy_stride, 0, n_cols, BLOCK, "", False)
            else:
                dot = dot + float("nan")
            spin_budget = 0
        _store_units(
            dxu_ptr + tl.cast(row, tl.int64) * dxu_stride + ucols,
            _bwd_pass2(y0, d0, dot, PACKED, IS_BF16, ASM).to(dxu_ptr.dtype.element_ty),
            u_mask,
            HINT,
        )
        y0 = y1
        d0 = d1
        y1 = y2
        d1 = d2
        y2 = y3
        d2 = d3
        dot0 = dot1
        j += 1  # noqa: SIM113 (a Triton loop-carried scalar)


# ------------------------------------------------------------------------------------------------ defaults
#: Packed path (:mod:`solkit.kernels.softmax.packed`), when the caller leaves ``packed``, ``coop`` and ``split``
#: None: taken on a GPU for 16-bit inputs (the measured case; fp32 keeps the other paths) if ``default``, with the
#: launch options of the first ``ranges`` entry ``(min_cols, max_cols, options)`` that holds the row width.
#: H200 (session 5, bf16): packed against the previous defaults, forward / forward + backward, 8192 x 128256
#: 1.188 / 2.772 ms against looped 1.389 / 3.317; 1024 x 262144 0.323 / 0.763 against split-row 0.380 / 0.872;
#: 8192 x 14336 forward with one chunk per row (no exchange), bf16 exponentials: 120.2 us against single-block
#: 133.9 (Liger 126.5). Round 2 (docs/kernels/norms.md).
PACKED_DEFAULT = {
    "fwd": {"default": True, "ranges": [(12289, 16384, {"block": 16384, "num_warps": 16, "per_sm": 1, "keep_e": 2,
                                                         "hint": 1}), (16385, None, {})]},
    "bwd": {"default": True, "ranges": [(16385, None, {})]},
}  # fmt: skip


def default_packed_options(direction: str, n_cols: int, dtype: torch.dtype) -> dict | None:
    """:data:`PACKED_DEFAULT`'s launch options for rows of ``n_cols`` (``direction`` "fwd" or "bwd"), or None
    when the packed path is not the default there (fp32, narrow rows)."""
    cfg = PACKED_DEFAULT[direction]
    if not cfg["default"] or dtype not in (torch.bfloat16, torch.float16):
        return None
    for lo, hi, opts in cfg["ranges"]:
        if n_cols >= lo and (hi is None or n_cols <= hi):
            return dict(opts)
    return None


def packed_options(packed, coop, split, direction: str, t: torch.Tensor) -> dict | None:
    """Launch options of the packed path, or None when it is not taken: an explicit ``packed`` wins, an
    explicit ``coop``/``split`` excludes it, else :data:`PACKED_DEFAULT` on a GPU."""
    if packed is None:
        if coop is not None or split is not None or not t.is_cuda or _interp():
            return None
        return default_packed_options(direction, t.shape[-1], t.dtype)
    if isinstance(packed, dict):  # (an empty dict: the packed path with its defaults)
        return dict(packed)
    return {} if packed else None


# ------------------------------------------------------------------------------------------------ launchers
_CAPACITY: dict = {}


def _packable(*ts: torch.Tensor) -> bool:
    """16-bit tensors that can be read as int32 words: even row length and row stride, 4-byte aligned."""
    return all(t.dtype in (torch.bfloat16, torch.float16) and t.shape[1] % 2 == 0 and t.stride(0) % 2 == 0
               and t.data_ptr() % 4 == 0 for t in ts)  # fmt: skip


def _units(t: torch.Tensor, packed: bool) -> tuple[torch.Tensor, int]:
    return (t.view(torch.int32), t.stride(0) // 2) if packed else (t, t.stride(0))


def _launch(kernel, args: list, meta: dict, n_rows: int, split: int, t: torch.Tensor, per_sm: int,
            groups: int | None, num_warps: int, interp: bool) -> dict | None:  # fmt: skip
    most = max(1, min(n_rows, groups or n_rows))
    if interp:
        n_groups = min(most, 4)
    else:
        key = (kernel.__name__, t.device.index, t.dtype, tuple(sorted(meta.items())))
        if key not in _CAPACITY:  # compile (no launch): the whole grid must be resident at once
            compiled = kernel.warmup(*args, grid=(1,), **meta)
            _CAPACITY[key] = resident_programs(compiled, num_warps, t.device)
        capacity, occ = _CAPACITY[key]
        n_groups = min(most, min(capacity, per_sm * torch.cuda.get_device_properties(t.device).multi_processor_count)
                       // split)  # fmt: skip
        if n_groups < 1:
            return None
    kernel[(n_groups * split,)](*args, **meta)
    return {"split": split, "groups": n_groups, "programs": n_groups * split, **({} if interp else occ)}


def _layout(n_cols: int, block: int, per_sm: int, t: torch.Tensor, interp: bool, fill: int) -> tuple[int, int, int]:
    """:func:`chunk_layout`'s ``(split, chunk_cols, block)``; with ``fill``, the fewest chunks (at most a quarter
    more, none wider than ``block``) whose count divides the ``per_sm x SMs`` resident slots, so every slot runs
    a program: 128256 columns in 4096-column chunks take 33 chunks x 16 groups (528 programs on 132 SMs x 4),
    not 32 x 16 (512: 16 slots idle)."""
    split, chunk_cols, blk = chunk_layout(n_cols, block)
    slots = per_sm * (4 if interp else _sms(t))
    if not fill or split < 2 or slots % split == 0:
        return split, chunk_cols, blk
    for s in range(split + 1, split + split // 4 + 1):
        cols = triton.cdiv(triton.cdiv(n_cols, s), 16) * 16
        if slots % s == 0 and triton.cdiv(n_cols, cols) == s:
            return s, cols, triton.next_power_of_2(cols)
    return split, chunk_cols, blk


def _fill(cfg: dict, fill: int | None) -> int:
    return cfg.get("fill", 0) if fill is None else fill


def _plan(t: torch.Tensor, packed: bool, block: int, per_sm: int, interp: bool, fill: int, groups: int | None,
          words: int) -> tuple[int, int, int, torch.Tensor]:  # fmt: skip
    """Both directions' launch plan: the row's chunk layout (16-bit rows that cannot be read as 32-bit words take
    half-size blocks: the same registers as packed) and the zeroed partials of the groups that run at once
    (``words`` tagged values per chunk: forward max, sum and the protocol's third word, unused here; backward one
    sum)."""
    n_rows, n_cols = t.shape
    split, chunk_cols, blk = _layout(n_cols, block if packed else max(block // 2, 16), per_sm, t, interp, fill)
    most = max(1, min(n_rows, groups or n_rows))
    partials = _partials(most if interp else min(most, max(per_sm * _sms(t) // split, 1)), split, words, t.device)
    return split, chunk_cols, blk, partials


def _partials(n_groups: int, split: int, words_per_chunk: int, device) -> torch.Tensor:
    """Eight slots of tagged 64-bit partials per group, zeroed (one memset per call: tags restart at 1)."""
    sp2 = max(triton.next_power_of_2(split), 2)
    return torch.zeros(8 * n_groups * words_per_chunk * sp2, dtype=torch.int64, device=device)


def softmax_forward_packed(
    x: torch.Tensor, y: torch.Tensor, *, block: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, keep_e: int | None = None, early_load: int | None = None,
    l2_prefetch: int | None = None, maxnreg: int | None = None, max_spins: int = 1 << 20,
    groups: int | None = None, fallback: bool | None = None, depth: int | None = None, skew: int | None = None,
    hint: int | None = None, fill: int | None = None,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over rows of the 2-D ``x`` (unit column stride) into ``y``; returns the launch
    facts, or None (nothing launched) when one group does not fit on the GPU at once. Options left None
    come from :data:`PACKED_CONFIG` ``["fwd"]``; ``fallback`` defaults to True under the interpreter."""
    cfg = config_for_width(PACKED_CONFIG["fwd"], x.shape[1])
    block, num_warps, per_sm = block or cfg["block"], num_warps or cfg["num_warps"], per_sm or cfg["per_sm"]
    n_rows, n_cols = x.shape
    interp = x.device.type != "cuda" or _interp()
    packed = _packable(x, y)
    split, chunk_cols, blk, partials = _plan(x, packed, block, per_sm, interp, _fill(cfg, fill), groups, words=3)
    xu, xu_stride = _units(x, packed)
    yu, yu_stride = _units(y, packed)
    pf = cfg["l2_prefetch"] if l2_prefetch is None else l2_prefetch
    aligned = x.data_ptr() % 16 == 0 and x.stride(0) % 8 == 0 and packed
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BLOCK=blk, PACKED=int(packed),
                IS_BF16=int(x.dtype == torch.bfloat16), KEEP_E=int(cfg["keep_e"] if keep_e is None else keep_e),
                EARLY_LOAD=int(cfg["early_load"] if early_load is None else early_load),
                PF=int(pf) if aligned and not interp else 0, FALLBACK=int(interp if fallback is None else fallback),
                ASM=int(not interp), DEPTH=int(depth or cfg.get("depth", 2)), SKEW=int(skew or cfg.get("skew", 1)),
                HINT=int(cfg.get("hint", 0) if hint is None else hint), num_warps=num_warps)  # fmt: skip
    if (meta["SKEW"], meta["DEPTH"]) not in ((1, 2), (1, 3), (2, 2)):
        raise SolkitError(f"softmax packed: (skew, depth) must be (1, 2), (1, 3) or (2, 2), got {meta['SKEW']}, "
                          f"{meta['DEPTH']}")  # fmt: skip
    if not interp:
        meta["maxnreg"] = maxnreg or min(255, 65536 // (per_sm * num_warps * 32) // 8 * 8)
    args = [x, xu, yu, partials, n_rows, n_cols, chunk_cols, x.stride(0), xu_stride, yu_stride,
            0 if interp else max_spins]  # fmt: skip
    return _launch(_softmax_fwd_packed_kernel, args, meta, n_rows, split, x, per_sm, groups, num_warps, interp)


def softmax_backward_packed(
    dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, *, block: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, early_load: int | None = None, l2_prefetch: int | None = None,
    maxnreg: int | None = None, max_spins: int = 1 << 20, groups: int | None = None, fallback: bool | None = None,
    keep_e: int | None = None, depth: int | None = None, skew: int | None = None, hint: int | None = None,
    fill: int | None = None,
) -> dict | None:  # fmt: skip
    """``dx = y (dy - sum(y dy))`` over rows (2-D, unit column stride); as :func:`softmax_forward_packed`
    (``keep_e``, ``depth`` and ``skew``, forward options, are accepted and ignored, so one option dict serves
    both)."""
    cfg = config_for_width(PACKED_CONFIG["bwd"], y.shape[1])
    block, num_warps, per_sm = block or cfg["block"], num_warps or cfg["num_warps"], per_sm or cfg["per_sm"]
    n_rows, n_cols = y.shape
    interp = y.device.type != "cuda" or _interp()
    packed = _packable(y, dy, dx)
    split, chunk_cols, blk, partials = _plan(y, packed, block, per_sm, interp, _fill(cfg, fill), groups, words=1)
    yu, yu_stride = _units(y, packed)
    du, du_stride = _units(dy, packed)
    dxu, dxu_stride = _units(dx, packed)
    pf = cfg["l2_prefetch"] if l2_prefetch is None else l2_prefetch
    aligned = packed and all(t.data_ptr() % 16 == 0 and t.stride(0) % 8 == 0 for t in (y, dy))
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BLOCK=blk, PACKED=int(packed),
                IS_BF16=int(y.dtype == torch.bfloat16),
                EARLY_LOAD=int(cfg["early_load"] if early_load is None else early_load),
                PF=int(pf) if aligned and not interp else 0, FALLBACK=int(interp if fallback is None else fallback),
                ASM=int(not interp), HINT=int(cfg.get("hint", 0) if hint is None else hint),
                num_warps=num_warps)  # fmt: skip
    if not interp:
        meta["maxnreg"] = maxnreg or min(255, 65536 // (per_sm * num_warps * 32) // 8 * 8)
    args = [y, dy, yu, du, dxu, partials, n_rows, n_cols, chunk_cols, y.stride(0), dy.stride(0), yu_stride,
            du_stride, dxu_stride, 0 if interp else max_spins]  # fmt: skip
    return _launch(_softmax_bwd_packed_kernel, args, meta, n_rows, split, y, per_sm, groups, num_warps, interp)


def _interp() -> bool:
    from solkit.kernels.common.device import interpreting

    return interpreting()


def _sms(t: torch.Tensor) -> int:
    return torch.cuda.get_device_properties(t.device).multi_processor_count
