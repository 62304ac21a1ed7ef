"""Triton kernels of the packed softmax path (register-held row chunks, tagged exchange): forward and backward.
Design, math and pipeline: :mod:`solkit.kernels.softmax.packed`, whose launchers run them."""

from __future__ import annotations

import triton
import triton.language as tl

from solkit.kernels.common.exchange import (
    L2E,
    LN2,
    await_max_sum,
    fast_log2,
    pack,
    pair_sums,
    pass1_packed,
    pass2_packed,
    prefetch_rows,
    unpack,
)
from solkit.kernels.common.spin import poll_tagged, poll_words, publish_tagged, spin_until_tagged, tagged, untag
from solkit.kernels.softmax.streaming import dot_range, online_max_sum


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
    pairs for bf16 inputs: the cross-entropy kernel's :func:`~solkit.kernels.common.exchange.pass1_packed`)."""
    E_BF16: tl.constexpr = (KEEP_E == 2) and IS_BF16
    if PACKED:
        if KEEP_E:
            m_c, m_ref, s_c, _sz, kept = pass1_packed(u, u != 0, IS_BF16, False, E_BF16, ASM)
        else:
            m_c, s_c, _sz = pair_sums(u, u != 0, IS_BF16, False)
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
def _fwd_pass2(kept, m_ref, big, total, PACKED: tl.constexpr, IS_BF16: tl.constexpr, KEEP_E: tl.constexpr,
               ASM: tl.constexpr):  # fmt: skip
    """The chunk's outputs from the row's ``(max, sum)``: packed words (16-bit, ``y = 2^(x L - lse_2)`` with
    ``lse_2 = M L + log2 S``: one FFMA and one EX2 per element), else fp32 ``exp(x - M) / S`` (the exact
    difference first: fp32 inputs keep torch's accuracy)."""
    if PACKED:
        E_BF16: tl.constexpr = (KEEP_E == 2) and IS_BF16
        lse2 = big * L2E + fast_log2(total, ASM)
        if E_BF16:  # one fma.rn.bf16x2 per pair (three bf16 roundings per value)
            return pass2_packed(kept, m_ref, lse2 * LN2, 1.0, tl.zeros([], dtype=tl.float32), IS_BF16, True, ASM)
        elif KEEP_E:
            c = tl.exp2(m_ref * L2E - lse2)
            e_lo, e_hi = unpack(kept, False)
            return pack(e_lo * c, e_hi * c, IS_BF16, ASM)
        else:
            lo, hi = unpack(kept, IS_BF16)
            return pack(tl.exp2(lo * L2E - lse2), tl.exp2(hi * L2E - lse2), IS_BF16, ASM)
    else:
        inv = 1.0 / total
        if KEEP_E:
            return kept * (tl.exp(m_ref - big) * inv)
        else:
            return tl.exp(kept.to(tl.float32) - big) * inv


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


# Over 80 lines: one software pipeline whose loop-carried registers rotate in one body (a split hides the order).
@triton.jit
def softmax_fwd_packed_kernel(
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
    slot_stride = n_groups * (3 * SPLIT_P2)  # 8 slots: a skew s needs 2 s + 2 (solkit.kernels.cross_entropy.split)
    pf_bytes = u_lim * 4 // 16 * 16  # (an fp32 element or a word of two 16-bit ones: 4 bytes)
    x0 = _load_units(xu_ptr, group, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    x1 = _load_units(xu_ptr, group + n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    x2 = _load_units(xu_ptr, group + 2 * n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    if AHEAD == 4:
        x3 = _load_units(xu_ptr, group + 3 * n_groups, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
    if PF > 0:  # the PF rows after the register loads on their way to L2 (the loop keeps them PF rows ahead)
        prefetch_rows(xu_ptr, group + AHEAD * n_groups, PF, n_groups, n_rows, xu_stride, u0, pf_bytes)
    m_c, m0, s0, k0 = _fwd_pass1(x0, PACKED, IS_BF16, KEEP_E, ASM)
    if SPLIT > 1:
        publish_tagged(gbase, chunk, 0, m_c, s0, 0.0, SPLIT_P2, False)
    if SKEW == 2:  # row r + G passed pass 1 too: two rows wait for their partners at any time
        m_c, m1, s1, k1 = _fwd_pass1(x1, PACKED, IS_BF16, KEEP_E, ASM)
        if (SPLIT > 1) & (group + n_groups < n_rows):
            publish_tagged(gbase + slot_stride, chunk, 1, m_c, s1, 0.0, SPLIT_P2, False)
    j = 0
    for row in tl.range(group, n_rows, n_groups):
        rl = row + AHEAD * n_groups
        if EARLY_LOAD:
            xn = _load_units(xu_ptr, rl, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
            if PF > 0:
                prefetch_rows(xu_ptr, rl + PF * n_groups, 1, n_groups, n_rows, xu_stride, u0, pf_bytes)
        base0 = gbase + (j & 7) * slot_stride
        if SPLIT > 1:
            wm, ws, _wz = poll_tagged(base0, j, SPLIT, SPLIT_P2, False)
        if SKEW == 2:
            m_c, mp, sp, kp = _fwd_pass1(x2, PACKED, IS_BF16, KEEP_E, ASM)
        else:
            m_c, mp, sp, kp = _fwd_pass1(x1, PACKED, IS_BF16, KEEP_E, ASM)
        if not EARLY_LOAD:
            xn = _load_units(xu_ptr, rl, n_rows, xu_stride, ucols, uoffs, u_lim, PAD, HINT)
            if PF > 0:
                prefetch_rows(xu_ptr, rl + PF * n_groups, 1, n_groups, n_rows, xu_stride, u0, pf_bytes)
        if SPLIT == 1:  # the whole row in this program: no exchange
            big = m0
            total = s0
            ok = 1
        else:
            if row + SKEW * n_groups < n_rows:  # (no arrival past the last row: it would take a slot still read)
                publish_tagged(gbase + ((j + SKEW) & 7) * slot_stride, chunk, j + SKEW, m_c, sp, 0.0, SPLIT_P2,
                                False)  # fmt: skip
            big, total, ok = await_max_sum(base0, j, wm, ws, spin_budget, SPLIT, SPLIT_P2)
        if ok == 0:
            if FALLBACK:  # partners not there (the interpreter): the whole row's statistics, here
                big, total = online_max_sum(x_ptr + tl.cast(row, tl.int64) * x_stride, 0, n_cols, BLOCK, "", False)
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
    tl.atomic_xchg(base + chunk, tagged(v, tl.cast(j + 1, tl.int64) << 32), sem="relaxed")


@triton.jit
def _await_sum(base, j, w, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr):
    """(sum of the arrival's values, 1 if all arrived else 0) from a first read ``w`` (one word per lane)."""
    w, _w1, _w2, ready = spin_until_tagged(base, j, w, w, w, spin_budget, SPLIT, SPLIT_P2, 1)
    return tl.sum(untag(w), axis=0), ready


@triton.jit
def _bwd_pass1(yu, du, PACKED: tl.constexpr, IS_BF16: tl.constexpr):
    if PACKED:
        y_lo, y_hi = unpack(yu, IS_BF16)
        d_lo, d_hi = unpack(du, IS_BF16)
        return tl.sum(y_lo * d_lo + y_hi * d_hi, axis=0)
    else:
        return tl.sum(yu.to(tl.float32) * du.to(tl.float32), axis=0)


@triton.jit
def _bwd_pass2(yu, du, dot, PACKED: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr):
    if PACKED:
        y_lo, y_hi = unpack(yu, IS_BF16)
        d_lo, d_hi = unpack(du, IS_BF16)
        return pack(y_lo * (d_lo - dot), y_hi * (d_hi - dot), IS_BF16, ASM)
    else:
        return yu.to(tl.float32) * (du.to(tl.float32) - dot)


@triton.jit
def softmax_bwd_packed_kernel(
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
        prefetch_rows(yu_ptr, group + 3 * n_groups, PF, n_groups, n_rows, yu_stride, u0, pf_bytes)
        prefetch_rows(du_ptr, group + 3 * n_groups, PF, n_groups, n_rows, du_stride, u0, pf_bytes)
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
                prefetch_rows(yu_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, yu_stride, u0, pf_bytes)
                prefetch_rows(du_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, du_stride, u0, pf_bytes)
        base0 = gbase + (j & 3) * slot_stride
        if SPLIT > 1:
            w, _w1, _w2 = poll_words(base0, j, SPLIT, SPLIT_P2, 1)
        dot1 = _bwd_pass1(y1, d1, PACKED, IS_BF16)
        if not EARLY_LOAD:
            y3 = _load_units(yu_ptr, r3, n_rows, yu_stride, ucols, uoffs, u_lim, 0, HINT)
            d3 = _load_units(du_ptr, r3, n_rows, du_stride, ucols, uoffs, u_lim, 0, HINT)
            if PF > 0:
                prefetch_rows(yu_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, yu_stride, u0, pf_bytes)
                prefetch_rows(du_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, du_stride, u0, pf_bytes)
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
                dot = dot_range(y_ptr + r64 * y_stride, dy_ptr + r64 * dy_stride, 0, n_cols, BLOCK, "", False)
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
