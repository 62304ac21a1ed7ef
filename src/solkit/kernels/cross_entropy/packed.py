"""Split-row cross-entropy, "packed" form (``split_skew = 4``): one exponential per logit.

The reread kernel (:func:`solkit.kernels.cross_entropy.split._ce_split_reread_kernel`) computes every
exponential twice (pass 1 for the chunk's sum, pass 2 for the gradient): two ``MUFU.EX2`` per logit, and
pass 2 costs ~4.5 instructions per logit (unpack, FFMA, EX2, FFMA, pack). This form keeps pass 1's
exponentials ``e = 2^((z - m_c) L)`` (``m_c`` the chunk max, so ``e <= 1``) packed two per 32-bit register
until the row's exchange completes, in the registers the re-read occupied, so:

* pass 2 with ``PASS2_BF16`` (bf16 logits): ``g = e * C - u`` on the bf16x2 pairs, one ``fma.rn.bf16x2``
  per two logits, ``C = 2^((m_c - lse) L) (1 + 2 lam lse) k`` and ``u = (eps / V) k`` rounded to bf16
  (the bf16 exponent range holds the ``1 / N`` of the mean: no subnormals); error per element within
  ~3 bf16 roundings (e, C, the result) where the reread kernel has one;
* pass 2 otherwise: ``e`` kept as f16 (11-bit mantissa; ``e < 2^-14`` of the chunk max lose precision,
  absolute error below ``2^-24`` of the chunk's largest probability), unpacked to fp32, one FFMA, packed
  to the logits' dtype;
* no re-read of the chunk (no L2 traffic for pass 2): DRAM bytes stay ``2·b·T·V``.

Iteration for row ``r`` (rows ``r + G``, ``r + 2G`` already loaded or in flight): issue the load of row
``r + 3G`` (``EARLY_LOAD``; else after pass 1, into the registers pass 1 freed), first poll of row
``r``'s partials, pass 1 of row ``r + G`` and its publication, wait for row ``r``, pass 2 of row ``r``
from its packed exponentials. Same exchange, slots (4), timeout and target handling as the reread kernel.
``UNROLL`` unrolls the row loop (the register rotation of the prefetch then needs no moves; with
``EARLY_LOAD = 0`` the rotation has period 2). ``FULL``: chunks of exactly ``BLOCK`` columns but the last
(``full_chunks``), loaded without masks. The row's log is ``lg2.approx`` (one MUFU.LG2, relative error
~2^-22, instead of the ~25-instruction precise ``log2``). ``PF`` = d > 0: the chunk of row ``r + (3 + d)G``
is bulk-prefetched into L2 when row ``r + 3G``'s load is issued, so the register loads hit L2 (short
latency) while DRAM traffic stays in flight without holding registers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from solkit.kernels.common.exchange import pass1_packed, pass2_packed, prefetch_rows
from solkit.kernels.common.spin import poll_tagged, publish_tagged
from solkit.kernels.cross_entropy.chunks import (
    await_tagged,
    load_words_row,
    on_timeout,
    slot,
    store_loss,
    store_target_grad,
    target_logit,
    word_chunk_geometry,
    zero_row,
)


@triton.jit
def _load_chunk(logits_w_ptr, targets_ptr, row, n_rows, w_row_stride, wcols, woffs, w_lim, W_PAD: tl.constexpr,
                WBLOCK: tl.constexpr, FULL: tl.constexpr):  # fmt: skip
    """A row's chunk as int32 words and its target; with ``FULL``, a chunk of ``WBLOCK`` words (all but the
    last with ``full_chunks``) is loaded without a mask (rows past the last read the last row, never used),
    so no register is preset with the padding before the load."""
    if FULL:
        if w_lim == WBLOCK:
            w = tl.load(logits_w_ptr + tl.minimum(row, n_rows - 1).to(tl.int64) * w_row_stride + wcols)
        else:
            w = tl.load(logits_w_ptr + tl.cast(row, tl.int64) * w_row_stride + wcols,
                        mask=woffs < tl.where(row < n_rows, w_lim, 0), other=W_PAD)  # fmt: skip
        return w, tl.load(targets_ptr + tl.minimum(row, n_rows - 1)).to(tl.int32)
    else:
        return load_words_row(logits_w_ptr, targets_ptr, row, n_rows, w_row_stride, wcols, woffs, w_lim, W_PAD)


@triton.jit
def _prime_rows(logits_w_ptr, targets_ptr, group, n_groups, n_rows, lw_stride, wcols, woffs, w_lim, col0,
                W_PAD: tl.constexpr, WBLOCK: tl.constexpr, FULL: tl.constexpr, PF: tl.constexpr):  # fmt: skip
    """The row pipeline's prologue: the chunks and targets of rows r, r + G, r + 2G (r = group) loaded, and with
    ``PF`` > 0 rows r + 3G .. r + (2 + PF)G on their way to L2 (the loop keeps PF rows ahead of its loads).
    Returns the three (words, target) pairs and the bulk prefetch's size in bytes."""
    x0, t0 = _load_chunk(logits_w_ptr, targets_ptr, group, n_rows, lw_stride, wcols, woffs, w_lim, W_PAD, WBLOCK, FULL)
    x1, t1 = _load_chunk(logits_w_ptr, targets_ptr, group + n_groups, n_rows, lw_stride, wcols, woffs, w_lim, W_PAD,
                         WBLOCK, FULL)  # fmt: skip
    x2, t2 = _load_chunk(logits_w_ptr, targets_ptr, group + 2 * n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                         W_PAD, WBLOCK, FULL)  # fmt: skip
    pf_bytes = w_lim * 4 // 16 * 16
    if PF > 0:
        prefetch_rows(logits_w_ptr, group + 3 * n_groups, PF, n_groups, n_rows, lw_stride, col0 // 2, pf_bytes)
    return x0, t0, x1, t1, x2, t2, pf_bytes


@triton.jit
def ce_packed_kernel(
    logits_ptr, logits_w_ptr, grad_ptr, grad_w_ptr, targets_ptr, loss_ptr, lse_ptr, n_valid_ptr, sync_ptr,
    partial_ptr, n_rows, n_cols, chunk_cols, logits_row_stride, grad_row_stride,
    ignore_index, label_smoothing, z_loss_scale, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr, MEAN: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr, WRITE_GRAD: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr,
    PASS2_BF16: tl.constexpr, EARLY_LOAD: tl.constexpr, UNROLL: tl.constexpr, FULL: tl.constexpr = 0,
    PF: tl.constexpr = 0,
):  # fmt: skip
    W_PAD: tl.constexpr = -8323200 if IS_BF16 else -67044352  # 0xFF80FF80 / 0xFC00FC00: two -inf
    WBLOCK: tl.constexpr = BLOCK // 2
    E_BF16: tl.constexpr = PASS2_BF16 and IS_BF16
    n_groups, group, chunk, col0, col_lim, col_end, woffs, wcols, w_lim, w_mask, lw_stride, gw_stride, grad_scale = (
        word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT, WBLOCK, MEAN)
    )
    uniform = label_smoothing / n_cols * grad_scale
    spin_budget = max_spins
    # prologue: row r = group passed pass 1 and is published, rows r + G and r + 2G in flight
    x0, t0, x1, t1, x2, t2, pf_bytes = _prime_rows(logits_w_ptr, targets_ptr, group, n_groups, n_rows, lw_stride, wcols,
                                                   woffs, w_lim, col0, W_PAD, WBLOCK, FULL, PF)  # fmt: skip
    zt0 = target_logit(logits_ptr, group.to(tl.int64), logits_row_stride, t0, n_cols)
    m_c, m0, s_c, sz, e0 = pass1_packed(x0, w_mask, IS_BF16, HAS_SMOOTHING, E_BF16, ASM)
    v0 = t0 != ignore_index
    k0 = 0
    if v0:
        publish_tagged(slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4), chunk, k0, m_c, s_c, sz, SPLIT_P2,
                        HAS_SMOOTHING)  # fmt: skip
    k1 = v0.to(tl.int32)
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        row64 = tl.cast(row, tl.int64)
        r1 = row + n_groups
        if EARLY_LOAD:
            x3, t3 = _load_chunk(logits_w_ptr, targets_ptr, r1 + 2 * n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                                 W_PAD, WBLOCK, FULL)  # fmt: skip
            if PF > 0:
                prefetch_rows(logits_w_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, lw_stride, col0 // 2,
                               pf_bytes)  # fmt: skip
        base0 = slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4)
        wm, ws, wz = poll_tagged(base0, k0, SPLIT, SPLIT_P2, HAS_SMOOTHING)
        v1 = (r1 < n_rows) & (t1 != ignore_index)
        zt1 = target_logit(logits_ptr, tl.minimum(r1, n_rows - 1).to(tl.int64), logits_row_stride, t1, n_cols)
        m_c, m1, s_c, sz, e1 = pass1_packed(x1, w_mask, IS_BF16, HAS_SMOOTHING, E_BF16, ASM)
        if not EARLY_LOAD:
            x3, t3 = _load_chunk(logits_w_ptr, targets_ptr, r1 + 2 * n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                                 W_PAD, WBLOCK, FULL)  # fmt: skip
            if PF > 0:
                prefetch_rows(logits_w_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, lw_stride, col0 // 2,
                               pf_bytes)  # fmt: skip
        if v1:
            publish_tagged(slot(partial_ptr, group, n_groups, k1, SPLIT_P2, 4), chunk, k1, m_c, s_c, sz,
                            SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
        g_row_w = grad_w_ptr + row64 * gw_stride
        if v0:
            lse, sz_row, ok = await_tagged(base0, k0, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING,
                                            ASM)  # fmt: skip
            lse, spin_budget = on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
            owner, t_in = store_loss(loss_ptr, lse_ptr, row64, t0, n_cols, col0, col_end, zt0, lse, sz_row,
                                      label_smoothing, z_loss_scale, HAS_SMOOTHING)  # fmt: skip
            if WRITE_GRAD:
                p_scale = (1.0 + 2.0 * z_loss_scale * lse) * grad_scale
                tl.store(g_row_w + wcols, pass2_packed(e0, m0, lse, p_scale, uniform, IS_BF16, E_BF16, ASM),
                         mask=w_mask)  # fmt: skip
                if owner & t_in:
                    store_target_grad(grad_ptr, row64, grad_row_stride, t0, zt0, lse, p_scale, uniform,
                                       label_smoothing, grad_scale)  # fmt: skip
        else:
            zero_row(loss_ptr, lse_ptr, g_row_w, row64, wcols, w_mask, chunk, WBLOCK, WRITE_GRAD)
        x1 = x2
        x2 = x3
        t0 = t1
        t1 = t2
        t2 = t3
        zt0 = zt1
        v0 = v1
        k0 = k1
        k1 = k1 + v1.to(tl.int32)
        e0 = e1
        m0 = m1


@triton.jit
def ce_lean_kernel(
    logits_ptr, logits_w_ptr, grad_ptr, grad_w_ptr, targets_ptr, loss_ptr, lse_ptr, n_valid_ptr, sync_ptr,
    partial_ptr, n_rows, n_cols, chunk_cols, logits_row_stride, grad_row_stride,
    ignore_index, label_smoothing, z_loss_scale, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr, MEAN: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr, WRITE_GRAD: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr,
    PASS2_BF16: tl.constexpr, UNROLL: tl.constexpr, FULL: tl.constexpr, PF: tl.constexpr = 0,
):  # fmt: skip
    """:func:`ce_packed_kernel` (late load) with less control and address work per row: every row is
    an arrival (an ignored row exchanges too, then writes loss 0 and a gradient scaled by 0: no branch, no
    arrival counter; arrival ``j`` is the group's ``j``-th row, slot ``j & 3``), and the row offsets advance
    by one increment per row instead of a multiply."""
    W_PAD: tl.constexpr = -8323200 if IS_BF16 else -67044352
    WBLOCK: tl.constexpr = BLOCK // 2
    E_BF16: tl.constexpr = PASS2_BF16 and IS_BF16
    n_groups, group, chunk, col0, col_lim, col_end, woffs, wcols, w_lim, w_mask, lw_stride, gw_stride, grad_scale = (
        word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT, WBLOCK, MEAN)
    )
    spin_budget = max_spins
    gbase = partial_ptr + group * (3 * SPLIT_P2)
    slot_stride = n_groups * (3 * SPLIT_P2)
    x0, t0, x1, t1, x2, t2, pf_bytes = _prime_rows(logits_w_ptr, targets_ptr, group, n_groups, n_rows, lw_stride, wcols,
                                                   woffs, w_lim, col0, W_PAD, WBLOCK, FULL, PF)  # fmt: skip
    zt0 = target_logit(logits_ptr, group.to(tl.int64), logits_row_stride, t0, n_cols)
    m_c, m0, s_c, sz, e0 = pass1_packed(x0, w_mask, IS_BF16, HAS_SMOOTHING, E_BF16, ASM)
    publish_tagged(gbase, chunk, 0, m_c, s_c, sz, SPLIT_P2, HAS_SMOOTHING)
    j = 0
    g_off = group.to(tl.int64) * gw_stride  # row offsets in words, advanced by one increment per row
    l_off = group.to(tl.int64) * logits_row_stride
    g_step = n_groups.to(tl.int64) * gw_stride
    l_step = n_groups.to(tl.int64) * logits_row_stride
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        r1 = row + n_groups
        base0 = gbase + (j & 3) * slot_stride
        wm, ws, wz = poll_tagged(base0, j, SPLIT, SPLIT_P2, HAS_SMOOTHING)
        t1c = tl.where((t1 >= 0) & (t1 < n_cols), t1, 0)
        zt1 = tl.load(logits_ptr + tl.where(r1 < n_rows, l_off + l_step, l_off) + t1c).to(tl.float32)
        m_c, m1, s_c, sz, e1 = pass1_packed(x1, w_mask, IS_BF16, HAS_SMOOTHING, E_BF16, ASM)
        x3, t3 = _load_chunk(logits_w_ptr, targets_ptr, r1 + 2 * n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                             W_PAD, WBLOCK, FULL)  # fmt: skip
        if PF > 0:
            prefetch_rows(logits_w_ptr, r1 + (2 + PF) * n_groups, 1, n_groups, n_rows, lw_stride, col0 // 2, pf_bytes)
        if r1 < n_rows:  # (no arrival past the last row: it would take a slot still to be read)
            publish_tagged(gbase + ((j + 1) & 3) * slot_stride, chunk, j + 1, m_c, s_c, sz, SPLIT_P2,
                            HAS_SMOOTHING)  # fmt: skip
        lse, sz_row, ok = await_tagged(base0, j, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING, ASM)
        lse, spin_budget = on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
        valid = t0 != ignore_index
        t_in = (t0 >= 0) & (t0 < n_cols)
        t_idx = tl.where(t_in, t0, 0)
        owner = (t_idx >= col0) & (t_idx < col_end)
        if owner:  # the program whose chunk holds the target (column 0 for an out-of-range or ignored target)
            loss = lse - zt0
            if HAS_SMOOTHING:
                loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - sz_row / n_cols)
            tl.store(loss_ptr + row, tl.where(valid, loss + z_loss_scale * lse * lse, 0.0))
            tl.store(lse_ptr + row, tl.where(valid, lse, 0.0))
        if WRITE_GRAD:
            scale = tl.where(valid, grad_scale, 0.0)  # an ignored row's gradient: exactly 0
            p_scale = (1.0 + 2.0 * z_loss_scale * lse) * scale
            u = label_smoothing / n_cols * scale
            tl.store(grad_w_ptr + g_off + wcols, pass2_packed(e0, m0, lse, p_scale, u, IS_BF16, E_BF16, ASM),
                     mask=w_mask)  # fmt: skip
            if owner & t_in & valid:
                # (g_off counts 32-bit words of two logits)
                store_target_grad(grad_ptr, g_off, 2, t0, zt0, lse, p_scale, u, label_smoothing, scale)
        x1 = x2
        x2 = x3
        t0 = t1
        t1 = t2
        t2 = t3
        zt0 = zt1
        e0 = e1
        m0 = m1
        j += 1  # noqa: SIM113 (a Triton loop-carried scalar)
        g_off += g_step
        l_off += l_step
