"""Cross-entropy forward + gradient with one DRAM read of the logits: cooperative split rows.

Each row of ``V`` logits is cut into ``SPLIT`` chunks of ``C = ceil(V / SPLIT)`` columns (rounded up to a
multiple of 16); one program owns one chunk and keeps it **in registers** for the whole row, so every
logit is read from device memory once and its gradient written once.

Math per row (fp32; base-2 exponentials, ``L = log2 e``), chunk ``c`` holding logits ``z``:

* pass 1 (registers): ``m_c = max z``, ``e = 2^((z - m_c) L)`` (kept in registers with ``KEEP_EXP``),
  ``s_c = sum e``, and ``sum z`` when label smoothing is on; publish ``(m_c, s_c, sum z)``;
* barrier of the row's ``SPLIT`` programs, then ``M = max m_i``, ``lse = M + ln(sum_i s_i 2^((m_i - M) L))``;
* pass 2 (registers): ``dL/dz = e 2^((m_c - lse) L) (1 + 2 lam lse) k - (eps / V) k`` with ``k`` the
  reduction's scale (1 / #non-ignored rows for ``mean``, read from device memory), written in the logits'
  dtype; the target column gets ``- (1 - eps) k`` more, stored once after the chunk (no per-element
  compare). The loss ``(1 - eps)(lse - z_y) + eps (lse - mean z) + lam lse^2`` and ``lse`` are written by
  the program whose chunk holds the target, so ``z_y`` is read from its own chunk. Ignored rows: 0, 0.

Bytes per call, ``T`` rows, ``b`` bytes per logit: ``2·b·T·V`` (one read, one write; ``b·T·V`` without
the gradient) + ``8·T`` targets + ``8·T`` loss/lse; the partials (``16·SPLIT`` bytes per row) stay in L2.

Synchronisation. The grid is **persistent**: ``G`` groups of ``SPLIT`` programs, group ``g`` walks rows
``g, g + G, ...``; its ``k``-th non-ignored row is its arrival ``k``. Programs spin until their peers'
partials are there, so all programs must be resident at once: the launcher sizes the grid from the
compiled kernel's registers, shared memory and warps (:func:`resident_programs`). Two barriers:

* tagged (default): each partial is one 64-bit word ``(k + 1) << 32 | fp32 bits`` written by a relaxed
  atomic exchange; a program re-reads its group's words until all tags read ``k + 1``. No counter, no
  fence (a release fence would also wait for the prefetch loads in flight);
* counted: fp32 partials, then an arrival counter (release add, acquire polling up to ``(k + 1)·SPLIT``).

Two kernels (``skew``): 0 exchange, then pass 2 from the exponentials kept in registers; 3 "reread":
one row ahead (the next row's pass 1 and publication before this row's wait), pass 2 re-reads its chunk
(from L2: a few MB of traffic after pass 1 read it), so the registers hold a two-row prefetch instead of
the waiting rows; 16-bit logits are read as int32 pairs (unpacked 16-bit values take a register each)
and the gradient packed with ``cvt.rn.bf16x2.f32``. Skews 4 and 5 (the default is 4) are the packed kernels
of :mod:`solkit.kernels.cross_entropy.packed`: one exponential per logit, kept packed for pass 2. (Skew 1, holding two
rows of exponentials, and 2, "deep", holding four packed chunks, were measured slower and removed: code at
commit 2469328; numbers in docs/kernels/gates-rope-ce.md.)

Partial slots rotate with ``k``. A kernel that publishes arrival ``j + s`` before waiting for arrival
``j`` (skew ``s``) needs ``2 s + 2`` slots: when a program publishes ``j + s`` it has only seen every peer
publish ``j - 1``, which a peer does at its own iteration ``j - 1 - s``, after reading arrival
``j - 2 - s`` and no later one; the slot it overwrites must hold an arrival no later than that. (With
fewer slots a lagging peer finds a later tag, spins out and flags NaN: seen on the H200.) Buffers are
zeroed per call (one memset). The spin is bounded (``max_spins``): a program that runs out sets a flag
the launcher adds to the losses as NaN (a visible failure, never a hang), computes NaN for that row and
never waits again. Under Triton's CPU
interpreter programs run one after another, so only ``SPLIT = 1`` (no barrier) can succeed there.
Softcapping is not handled here (the caller falls back to the two-sweep kernel).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.spin import _poll_tagged, _publish_tagged, _spin_until_tagged, _untag

L2E = tl.constexpr(1.4426950408889634)  # log2(e): exponentials in base 2 (one MUFU.EX2 each)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _log2(v, FAST: tl.constexpr):
    if FAST:  # one MUFU.LG2 (relative error ~2^-22) instead of the ~25-instruction precise log2
        return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [v], dtype=tl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    return tl.log2(v)


@triton.jit
def _combine(ms, ss, FAST_LOG: tl.constexpr):
    """lse from the chunks' (max, sum of exp relative to that max); ``FAST_LOG``: ``lg2.approx`` (GPU only)."""
    big = tl.max(ms, axis=0)
    return big + _log2(tl.sum(ss * tl.exp2(ms * L2E - big * L2E), axis=0), FAST_LOG) * LN2


@triton.jit
def _exchange_counted(partial_ptr, sync_ptr, group, chunk, n_groups, k, m_c, s_c, sz, spin_budget,
                      SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    """Publish (m, s, sum z) as fp32, arrive at the group's counter (release), spin until it reaches
    (k + 1)·SPLIT (acquire), read the peers' partials. The release fence also waits for this thread's
    memory operations in flight (the prefetch): the cost the tagged exchange avoids."""
    base = partial_ptr + ((k % 2) * n_groups + group) * (3 * SPLIT_P2)
    tl.store(base + chunk, m_c)
    tl.store(base + SPLIT_P2 + chunk, s_c)
    tl.store(base + 2 * SPLIT_P2 + chunk, sz)
    tl.debug_barrier()  # every thread's partial stores are ordered before the release below
    goal = (k + 1) * SPLIT
    arrived = tl.atomic_add(sync_ptr + group, 1, sem="release") + 1
    spins = 0
    while (arrived < goal) & (spins < spin_budget):
        arrived = tl.atomic_add(sync_ptr + group, 0, sem="acquire")
        spins += 1
    offs = tl.arange(0, SPLIT_P2)
    pm = offs < SPLIT
    ms = tl.load(base + offs, mask=pm, other=-float("inf"), volatile=True)
    ss = tl.load(base + SPLIT_P2 + offs, mask=pm, other=0.0, volatile=True)
    if HAS_SMOOTHING:
        sz = tl.sum(tl.load(base + 2 * SPLIT_P2 + offs, mask=pm, other=0.0, volatile=True), axis=0)
    return _combine(ms, ss, False), sz, (arrived >= goal).to(tl.int32)


@triton.jit
def _slot(partial_ptr, group, n_groups, k, SPLIT_P2: tl.constexpr, SLOTS: tl.constexpr):
    return partial_ptr + ((k % SLOTS) * n_groups + group) * (3 * SPLIT_P2)


@triton.jit
def _await_tagged(base, k, wm, ws, wz, sz, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                  HAS_SMOOTHING: tl.constexpr, FAST_LOG: tl.constexpr):  # fmt: skip
    """From a first read (``wm, ws, wz``), re-read the words until every tag matches (at most ``spin_budget``
    times: :func:`~solkit.kernels.common.spin._spin_until_tagged`); returns (lse, sum z over the row, 1 if all arrived
    else 0). ``FAST_LOG``: the row's log by ``lg2.approx``."""
    wm, ws, wz, ready = _spin_until_tagged(base, k, wm, ws, wz, spin_budget, SPLIT, SPLIT_P2,
                                           3 if HAS_SMOOTHING else 2)  # fmt: skip
    if HAS_SMOOTHING:
        sz = tl.sum(_untag(wz), axis=0)
    return _combine(_untag(wm), _untag(ws), FAST_LOG), sz, ready


@triton.jit
def _exchange_tagged(partial_ptr, group, chunk, n_groups, k, m_c, s_c, sz, spin_budget,
                     SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    base = _slot(partial_ptr, group, n_groups, k, SPLIT_P2, 2)
    _publish_tagged(base, chunk, k, m_c, s_c, sz, SPLIT_P2, HAS_SMOOTHING)
    wm, ws, wz = _poll_tagged(base, k, SPLIT, SPLIT_P2, HAS_SMOOTHING)
    return _await_tagged(base, k, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING, False)


@triton.jit
def _on_timeout(ok, lse, spin_budget, flag_ptr):
    """A peer never arrived: NaN for this row, the flag set (once per program; the launcher adds it to the
    losses), and no more waiting from now on."""
    if ok == 0:
        lse = lse + float("nan")
        if spin_budget > 0:
            tl.atomic_xchg(flag_ptr, 0x7FC00000)  # the int32 bits of a float NaN
        spin_budget = 0
    return lse, spin_budget


@triton.jit
def _chunk_stats(x, col_mask, HAS_SMOOTHING: tl.constexpr):
    """Pass 1 over a chunk in registers: (z, e = 2^((z - m_ref) L), max, m_ref, sum e, sum z)."""
    z = x.to(tl.float32)  # padding is -inf: exp2 gives 0, no per-element select
    m_c = tl.max(z, axis=0)
    m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)  # a chunk of padding only
    e = tl.exp2(z * L2E - m_ref * L2E)
    if HAS_SMOOTHING:
        sz = tl.sum(tl.where(col_mask, z, 0.0), axis=0)
    else:
        sz = 0.0
    return z, e, m_c, m_ref, tl.sum(e, axis=0), sz


@triton.jit
def _store_target_grad(grad_ptr, row, row_stride, target, z_t, lse, p_scale, uniform, label_smoothing, grad_scale):
    """The target column's gradient, which has ``- (1 - eps) k`` more than the chunk's formula gave it, stored
    over the chunk's value at ``grad_ptr + row * row_stride + target`` by the program that owns the column (one
    store per row, no per-element compare; the address is formed after the barrier, as the kernels had it)."""
    g_t = tl.exp2(z_t * L2E - lse * L2E) * p_scale - uniform - (1.0 - label_smoothing) * grad_scale
    tl.debug_barrier()  # after every thread's store of this chunk, the target's value wins
    tl.store(grad_ptr + row * row_stride + target, g_t.to(grad_ptr.dtype.element_ty))


@triton.jit
def _store_loss(loss_ptr, lse_ptr, row64, target, n_cols, col0, col_end, z_t, lse, sz_row, label_smoothing,
                z_loss_scale, HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    """A row's loss and lse, stored by the program whose chunk holds the target (column 0 for an out-of-range
    target); returns (this program owns the target's column, the target is in range)."""
    t_in = (target >= 0) & (target < n_cols)
    owner = (tl.where(t_in, target, 0) >= col0) & (tl.where(t_in, target, 0) < col_end)
    if owner:
        loss = lse - z_t
        if HAS_SMOOTHING:
            loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - sz_row / n_cols)
        tl.store(loss_ptr + row64, loss + z_loss_scale * lse * lse)
        tl.store(lse_ptr + row64, lse)
    return owner, t_in


@triton.jit
def _finish_row(loss_ptr, lse_ptr, grad_ptr, grad_row_stride, g_row, row64, cols, col_mask, chunk, col0, col_end,
                target, n_cols, z_t, z, e, m_ref, lse, sz, grad_scale, label_smoothing, z_loss_scale,
                WRITE_GRAD: tl.constexpr, KEEP_EXP: tl.constexpr):  # fmt: skip
    """Loss and lse, then pass 2: the gradient of the chunk from registers, and the target's column fixed.
    Both by the program whose chunk holds the target (column 0 for an out-of-range target): ``z_t`` is then
    read from the program's own chunk, which no other program writes, so no cross-program ordering."""
    t_in = (target >= 0) & (target < n_cols)
    t_idx = tl.where(t_in, target, 0)
    owner = (t_idx >= col0) & (t_idx < col_end)
    if owner:
        loss = lse - z_t
        if label_smoothing > 0:
            loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - sz / n_cols)
        tl.store(loss_ptr + row64, loss + z_loss_scale * lse * lse)
        tl.store(lse_ptr + row64, lse)
    if WRITE_GRAD:
        uniform = label_smoothing / n_cols * grad_scale
        p_scale = (1.0 + 2.0 * z_loss_scale * lse) * grad_scale
        if KEEP_EXP:
            g = e * (tl.exp2(m_ref * L2E - lse * L2E) * p_scale) - uniform
        else:
            g = tl.exp2(z * L2E - lse * L2E) * p_scale - uniform
        tl.store(g_row + cols, g.to(g_row.dtype.element_ty), mask=col_mask)
        if owner & t_in:
            _store_target_grad(grad_ptr, row64, grad_row_stride, target, z_t, lse, p_scale, uniform, label_smoothing,
                               grad_scale)  # fmt: skip


@triton.jit
def _zero_row(loss_ptr, lse_ptr, g_row, row64, cols, col_mask, chunk, BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr):
    if chunk == 0:
        tl.store(loss_ptr + row64, 0.0)
        tl.store(lse_ptr + row64, 0.0)
    if WRITE_GRAD:
        tl.store(g_row + cols, tl.zeros([BLOCK], dtype=g_row.dtype.element_ty), mask=col_mask)


@triton.jit
def _target_logit(logits_ptr, row64, logits_row_stride, target, n_cols):
    t_in = (target >= 0) & (target < n_cols)
    return tl.load(logits_ptr + row64 * logits_row_stride + tl.where(t_in, target, 0)).to(tl.float32)


@triton.jit
def _ce_split_kernel(
    logits_ptr, grad_ptr, targets_ptr, loss_ptr, lse_ptr, n_valid_ptr, sync_ptr, partial_ptr,
    n_rows, n_cols, chunk_cols, logits_row_stride, grad_row_stride,
    ignore_index, label_smoothing, z_loss_scale, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr, MEAN: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr, WRITE_GRAD: tl.constexpr, KEEP_EXP: tl.constexpr, PREFETCH: tl.constexpr,
    TAGGED: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    col0 = chunk * chunk_cols
    offs = tl.arange(0, BLOCK)
    cols = col0 + offs
    col_lim = tl.minimum(chunk_cols, n_cols - col0)  # valid columns of this chunk (<= 0: none)
    col_mask = offs < col_lim
    col_end = col0 + col_lim
    if MEAN:
        grad_scale = 1.0 / tl.maximum(tl.load(n_valid_ptr).to(tl.float32), 1.0)
    else:
        grad_scale = 1.0
    spin_budget = max_spins
    k = 0  # rows synchronised so far by this group (ignored rows skip the barrier, in every program alike)
    # register prefetch: the next row's chunk is loaded while this row is reduced, synchronised and written
    x_next = tl.load(logits_ptr + group.to(tl.int64) * logits_row_stride + cols,
                     mask=offs < tl.where(group < n_rows, col_lim, 0), other=-float("inf"))  # fmt: skip
    t_next = tl.load(targets_ptr + tl.minimum(group, n_rows - 1)).to(tl.int32)
    for row in range(group, n_rows, n_groups):
        row64 = tl.cast(row, tl.int64)
        if PREFETCH:
            x = x_next
            target = t_next
            nxt = row + n_groups
            x_next = tl.load(logits_ptr + nxt.to(tl.int64) * logits_row_stride + cols,
                             mask=offs < tl.where(nxt < n_rows, col_lim, 0), other=-float("inf"))  # fmt: skip
            t_next = tl.load(targets_ptr + tl.minimum(nxt, n_rows - 1)).to(tl.int32)
        else:
            x = tl.load(logits_ptr + row64 * logits_row_stride + cols, mask=col_mask, other=-float("inf"))
            target = tl.load(targets_ptr + row64).to(tl.int32)
        g_row = grad_ptr + row64 * grad_row_stride
        if target == ignore_index:
            _zero_row(loss_ptr, lse_ptr, g_row, row64, cols, col_mask, chunk, BLOCK, WRITE_GRAD)
        else:
            # read before this program arrives at the barrier, hence before any peer overwrites the row
            z_t = _target_logit(logits_ptr, row64, logits_row_stride, target, n_cols)
            z, e, m_c, m_ref, s_c, sz = _chunk_stats(x, col_mask, HAS_SMOOTHING)
            if SPLIT > 1:
                if TAGGED:
                    lse, sz, ok = _exchange_tagged(partial_ptr, group, chunk, n_groups, k, m_c, s_c, sz, spin_budget,
                                                   SPLIT, SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
                else:
                    lse, sz, ok = _exchange_counted(partial_ptr, sync_ptr, group, chunk, n_groups, k, m_c, s_c, sz,
                                                    spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
                lse, spin_budget = _on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
                k += 1
            else:
                lse = m_ref + tl.log2(s_c) * LN2
            _finish_row(loss_ptr, lse_ptr, grad_ptr, grad_row_stride, g_row, row64, cols, col_mask, chunk, col0,
                        col_end, target, n_cols, z_t, z, e, m_ref, lse, sz, grad_scale, label_smoothing, z_loss_scale,
                        WRITE_GRAD, KEEP_EXP)  # fmt: skip


@triton.jit
def _unpack(w, IS_BF16: tl.constexpr):
    """Two 16-bit logits packed in an int32 word (little-endian: the even column in the low half) -> fp32."""
    if IS_BF16:
        lo = (w << 16).to(tl.float32, bitcast=True)
        hi = (w & -65536).to(tl.float32, bitcast=True)
    else:
        lo = (w & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (w >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def _pack(lo, hi, IS_BF16: tl.constexpr, ASM: tl.constexpr):
    """fp32 pairs -> one int32 word of two 16-bit values; with ``ASM`` one ``cvt.rn.{bf16,f16}x2.f32`` per
    pair (F2FP, full rate) instead of two single conversions on the quarter-rate pipe (the MUFU's)."""
    if ASM:
        cvt: tl.constexpr = "cvt.rn.bf16x2.f32 $0, $1, $2;" if IS_BF16 else "cvt.rn.f16x2.f32 $0, $1, $2;"
        return tl.inline_asm_elementwise(cvt, "=r,f,f", [hi, lo], dtype=tl.int32, is_pure=True, pack=1)
    dt: tl.constexpr = tl.bfloat16 if IS_BF16 else tl.float16
    lo_bits = lo.to(dt).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return lo_bits | (hi.to(dt).to(tl.int16, bitcast=True).to(tl.int32) << 16)


@triton.jit
def _pair_sums(w, w_mask, IS_BF16: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """Pass 1 over a packed chunk: (max, sum of 2^((z - m_ref) L), sum z)."""
    lo, hi = _unpack(w, IS_BF16)
    m_c = tl.max(tl.maximum(lo, hi), axis=0)  # one block reduction for both halves
    m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
    s_c = tl.sum(tl.exp2(lo * L2E - m_ref * L2E) + tl.exp2(hi * L2E - m_ref * L2E), axis=0)
    if HAS_SMOOTHING:
        sz = tl.sum(tl.where(w_mask, lo + hi, 0.0), axis=0)
    else:
        sz = 0.0
    return m_c, s_c, sz


@triton.jit
def _word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT: tl.constexpr,
                         WBLOCK: tl.constexpr, MEAN: tl.constexpr):  # fmt: skip
    """The program's group and chunk, its columns as 32-bit words (two 16-bit logits each), the row strides in
    words and the gradient's scale (1 / #non-ignored rows for ``mean``): the preamble of every word-reading kernel."""
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    col0 = chunk * chunk_cols
    col_lim = tl.minimum(chunk_cols, n_cols - col0)
    col_end = col0 + col_lim
    woffs = tl.arange(0, WBLOCK)
    wcols = col0 // 2 + woffs
    w_lim = col_lim // 2
    w_mask = woffs < w_lim
    lw_stride = logits_row_stride // 2
    gw_stride = grad_row_stride // 2
    if MEAN:
        grad_scale = 1.0 / tl.maximum(tl.load(n_valid_ptr).to(tl.float32), 1.0)
    else:
        grad_scale = 1.0
    return n_groups, group, chunk, col0, col_lim, col_end, woffs, wcols, w_lim, w_mask, lw_stride, gw_stride, grad_scale


@triton.jit
def _load_words_row(logits_w_ptr, targets_ptr, row, n_rows, w_row_stride, wcols, woffs, w_lim, W_PAD: tl.constexpr):
    """A row's chunk as int32 words (-inf pairs past the last row) and its target."""
    w = tl.load(logits_w_ptr + tl.cast(row, tl.int64) * w_row_stride + wcols,
                mask=woffs < tl.where(row < n_rows, w_lim, 0), other=W_PAD)  # fmt: skip
    return w, tl.load(targets_ptr + tl.minimum(row, n_rows - 1)).to(tl.int32)


@triton.jit
def _ce_split_reread_kernel(
    logits_ptr, logits_w_ptr, grad_ptr, grad_w_ptr, targets_ptr, loss_ptr, lse_ptr, n_valid_ptr, sync_ptr,
    partial_ptr, n_rows, n_cols, chunk_cols, logits_row_stride, grad_row_stride,
    ignore_index, label_smoothing, z_loss_scale, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK: tl.constexpr, MEAN: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr, WRITE_GRAD: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr,
    UNROLL: tl.constexpr = 1,
):  # fmt: skip
    """Rows overlapped by one, but a row is **not** held in registers while its exchange completes: pass 2
    re-reads the chunk, one iteration (a few MB of traffic) after pass 1 read it, so from L2. The registers
    go to the prefetch instead: rows r + 2G and r + 3G are in flight from DRAM. An iteration: issue the
    loads of row r + 3G (DRAM) and row r (L2 re-read) and the first poll of row r's partials, pass 1 +
    publish of row r + G, wait for row r, pass 2 from the re-read. Four partial slots. 16-bit logits are
    read as int32 pairs (an unpacked 16-bit value takes a whole register) and the gradient packed back."""
    W_PAD: tl.constexpr = -8323200 if IS_BF16 else -67044352  # 0xFF80FF80 / 0xFC00FC00: two -inf
    WBLOCK: tl.constexpr = BLOCK // 2
    n_groups, group, chunk, col0, col_lim, col_end, woffs, wcols, w_lim, w_mask, lw_stride, gw_stride, grad_scale = (
        _word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT, WBLOCK, MEAN)
    )
    uniform = label_smoothing / n_cols * grad_scale
    spin_budget = max_spins
    # prologue: row r published, r + G and r + 2G in flight (r = group < n_rows: the launcher's grid)
    x0, t0 = _load_words_row(logits_w_ptr, targets_ptr, group, n_rows, lw_stride, wcols, woffs, w_lim, W_PAD)
    x1, t1 = _load_words_row(logits_w_ptr, targets_ptr, group + n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                             W_PAD)  # fmt: skip
    x2, t2 = _load_words_row(logits_w_ptr, targets_ptr, group + 2 * n_groups, n_rows, lw_stride, wcols, woffs,
                             w_lim, W_PAD)  # fmt: skip
    zt0 = _target_logit(logits_ptr, group.to(tl.int64), logits_row_stride, t0, n_cols)
    m_c, s_c, sz = _pair_sums(x0, w_mask, IS_BF16, HAS_SMOOTHING)
    v0 = t0 != ignore_index
    k0 = 0
    if v0:
        _publish_tagged(_slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4), chunk, k0, m_c, s_c, sz, SPLIT_P2,
                        HAS_SMOOTHING)  # fmt: skip
    k1 = v0.to(tl.int32)
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        row64 = tl.cast(row, tl.int64)
        r1 = row + n_groups
        x3, t3 = _load_words_row(logits_w_ptr, targets_ptr, r1 + 2 * n_groups, n_rows, lw_stride, wcols, woffs,
                                 w_lim, W_PAD)  # fmt: skip
        xr = tl.load(logits_w_ptr + row64 * lw_stride + wcols, mask=w_mask, other=W_PAD)  # row r again: from L2
        base0 = _slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4)
        wm, ws, wz = _poll_tagged(base0, k0, SPLIT, SPLIT_P2, HAS_SMOOTHING)
        v1 = (r1 < n_rows) & (t1 != ignore_index)
        zt1 = _target_logit(logits_ptr, tl.minimum(r1, n_rows - 1).to(tl.int64), logits_row_stride, t1, n_cols)
        m_c, s_c, sz = _pair_sums(x1, w_mask, IS_BF16, HAS_SMOOTHING)
        if v1:
            _publish_tagged(_slot(partial_ptr, group, n_groups, k1, SPLIT_P2, 4), chunk, k1, m_c, s_c, sz,
                            SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
        g_row_w = grad_w_ptr + row64 * gw_stride
        if v0:
            lse, sz_row, ok = _await_tagged(base0, k0, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2,
                                            HAS_SMOOTHING, False)  # fmt: skip
            lse, spin_budget = _on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
            owner, t_in = _store_loss(loss_ptr, lse_ptr, row64, t0, n_cols, col0, col_end, zt0, lse, sz_row,
                                      label_smoothing, z_loss_scale, HAS_SMOOTHING)  # fmt: skip
            if WRITE_GRAD:
                p_scale = (1.0 + 2.0 * z_loss_scale * lse) * grad_scale
                lo, hi = _unpack(xr, IS_BF16)
                g_lo = tl.exp2(lo * L2E - lse * L2E) * p_scale - uniform
                g_hi = tl.exp2(hi * L2E - lse * L2E) * p_scale - uniform
                tl.store(g_row_w + wcols, _pack(g_lo, g_hi, IS_BF16, ASM), mask=w_mask)
                if owner & t_in:
                    _store_target_grad(grad_ptr, row64, grad_row_stride, t0, zt0, lse, p_scale, uniform,
                                       label_smoothing, grad_scale)  # fmt: skip
        else:
            _zero_row(loss_ptr, lse_ptr, g_row_w, row64, wcols, w_mask, chunk, WBLOCK, WRITE_GRAD)
        x1 = x2
        x2 = x3
        t0 = t1
        t1 = t2
        t2 = t3
        zt0 = zt1
        v0 = v1
        k0 = k1
        k1 = k1 + v1.to(tl.int32)


def chunk_layout(n_cols: int, block: int) -> tuple[int, int, int]:
    """(split, chunk_cols, block) for a row of ``n_cols``: as few chunks of at most ``block`` columns as
    possible, chunk widths a multiple of 16 (16-byte vector loads), ``block`` shrunk to the chunk's power of 2."""
    split = triton.cdiv(n_cols, block)
    chunk_cols = triton.cdiv(triton.cdiv(n_cols, split), 16) * 16
    split = triton.cdiv(n_cols, chunk_cols)  # rounding up the width can leave the last chunk empty
    return split, chunk_cols, triton.next_power_of_2(chunk_cols)


def programs_per_sm(n_regs: int, shared: int, num_warps: int, *, regs_sm: int = 65536, smem_sm: int = 228 * 1024,
                    threads_sm: int = 2048, max_blocks: int = 32) -> dict[str, int]:  # fmt: skip
    """Resident programs per SM by each limit: registers (allocated per warp in units of 256), shared
    memory (+1 KB the driver reserves per block), threads, blocks; ``min`` of the values is the answer."""
    regs_per_warp = triton.cdiv(max(n_regs, 1) * 32, 256) * 256
    return {
        "regs": regs_sm // (regs_per_warp * num_warps),
        "smem": smem_sm // (shared + 1024),
        "threads": threads_sm // (num_warps * 32),
        "blocks": max_blocks,
    }


def resident_programs(kernel, num_warps: int, device: torch.device) -> tuple[int, dict]:
    """How many programs of a compiled Triton kernel the GPU holds at once, and the facts behind it."""
    if hasattr(kernel, "_init_handles"):
        kernel._init_handles()  # loads the binary: fills n_regs / n_spills
    props = torch.cuda.get_device_properties(device)
    n_regs, shared = int(kernel.n_regs), int(kernel.metadata.shared)
    limits = programs_per_sm(
        n_regs, shared, num_warps, regs_sm=getattr(props, "regs_per_multiprocessor", 65536),
        smem_sm=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
        threads_sm=getattr(props, "max_threads_per_multi_processor", 2048),
    )  # fmt: skip
    per_sm = min(limits.values())
    info = {"n_regs": n_regs, "n_spills": int(getattr(kernel, "n_spills", 0)), "shared": shared,
            "per_sm_limits": limits, "resident_per_sm": per_sm}  # fmt: skip
    return per_sm * props.multi_processor_count, info


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _packable(t: torch.Tensor) -> bool:
    """16-bit logits that can be read as int32 words: even row length, even row stride, 4-byte aligned."""
    return (t.dtype in (torch.bfloat16, torch.float16) and t.shape[1] % 2 == 0 and t.stride(0) % 2 == 0
            and t.stride(1) == 1 and t.data_ptr() % 4 == 0)  # fmt: skip


def launch_cross_entropy_split(
    logits: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor, lse: torch.Tensor, n_valid: torch.Tensor,
    *, grad: torch.Tensor | None, mean: bool, ignore_index: int, label_smoothing: float, z_loss_scale: float,
    block: int = 16384, num_warps: int = 16, programs_per_sm: int = 1, keep_exp: bool = True,
    prefetch: bool = True, tagged: bool = True, skew: int = 0, maxnreg: int | None = None,
    max_spins: int = 1 << 20, groups: int | None = None, pass2_bf16: bool = True, early_load: bool = True,
    unroll: int = 1, full_chunks: bool = False, l2_prefetch: int = 0,
) -> dict | None:  # fmt: skip
    """Launch the cooperative kernel (see the module docstring); returns the launch facts, or None when it
    does not apply here (the caller falls back): a chunked row under the interpreter, or fewer resident
    programs than one group. ``skew`` 0: :func:`_ce_split_kernel`, 3: :func:`_ce_split_reread_kernel`, 4 and
    5 (lean): the packed kernels of :mod:`solkit.kernels.cross_entropy.packed` (``pass2_bf16``, ``early_load``,
    ``full_chunks``, ``l2_prefetch``: rows bulk-prefetched into L2 ahead of the loads); 3-5 need 16-bit logits
    of even length and row stride, else 0; ``unroll``: their row loop. ``groups`` caps the number of groups."""
    n_rows, n_cols = logits.shape
    split, chunk_cols, blk = chunk_layout(n_cols, block)
    interpreting = _interpreting() or logits.device.type != "cuda"
    if interpreting and split > 1 and groups is None:
        return None  # programs run one after another there: the barrier could never be met
    if skew not in (0, 3, 4, 5):
        raise SolkitError(f"cross_entropy: split skew must be 0 (plain), 3 (reread), 4/5 (packed), got {skew} "
                          "(1 and 2 were measured slower and removed: code at commit 2469328)")  # fmt: skip
    if split == 1 or not (_packable(logits) and (grad is None or _packable(grad))):
        skew = 0  # one chunk per row: no exchange to hide; the reread kernel reads 16-bit pairs
    tagged = bool(tagged or skew)
    grad_arg, grad_stride = (grad, grad.stride(0)) if grad is not None else (logits, 0)
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BLOCK=blk, MEAN=mean,
                HAS_SMOOTHING=label_smoothing > 0, WRITE_GRAD=grad is not None, num_warps=num_warps)  # fmt: skip
    if skew == 0:
        meta.update(KEEP_EXP=int(keep_exp), PREFETCH=int(prefetch), TAGGED=int(tagged))
    if skew:
        meta.update(IS_BF16=logits.dtype == torch.bfloat16, ASM=not interpreting, UNROLL=int(unroll))
    kernel_fn = _ce_split_reread_kernel if skew else _ce_split_kernel
    if skew >= 4:  # the packed kernels (their module imports this one)
        from solkit.kernels.cross_entropy import packed as _ce_packed

        kernel_fn = _ce_packed._ce_split_packed_kernel if skew == 4 else _ce_packed._ce_split_lean_kernel
        aligned = logits.data_ptr() % 16 == 0 and logits.stride(0) % 8 == 0  # the bulk prefetch's 16 bytes
        meta.update(PASS2_BF16=int(pass2_bf16), FULL=int(full_chunks), PF=l2_prefetch if aligned and not interpreting
                    else 0, **({"EARLY_LOAD": int(early_load)} if skew == 4 else {}))  # fmt: skip
        if full_chunks:  # chunks of exactly BLOCK columns but the last (loaded without masks)
            split, chunk_cols = triton.cdiv(n_cols, blk), blk
            meta.update(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2))
    if maxnreg and not interpreting:
        meta["maxnreg"] = maxnreg
    info: dict = {"split": split, "chunk_cols": chunk_cols, "block": blk}
    n_sms = torch.cuda.get_device_properties(logits.device).multi_processor_count if not interpreting else 1
    most = max(1, min(n_rows, groups or n_rows, 4 if interpreting else programs_per_sm * n_sms // split))
    # one zeroed buffer (one memset per call): the counters + timeout flag, then the partials (fp32, or
    # 64-bit tagged words), 16-byte aligned (the same specialisation whatever the grid)
    n_sync = (most + 4) // 4 * 4
    n_slots = 4 if skew else 2  # 2 + 2 * (rows a program publishes ahead of its wait): module docstring
    n_part = n_slots * most * 3 * meta["SPLIT_P2"]
    buf = torch.zeros(n_sync + 2 * n_part, dtype=torch.int32, device=logits.device)
    sync = buf[: most + 1]
    partials = buf[n_sync:].view(torch.int64) if tagged else buf[n_sync : n_sync + n_part].view(torch.float32)
    tail = [n_rows, n_cols, chunk_cols, logits.stride(0), grad_stride, ignore_index, float(label_smoothing),
            float(z_loss_scale), max_spins]  # fmt: skip
    if skew:
        args = [logits, logits.view(torch.int32), grad_arg, grad_arg.view(torch.int32), targets, losses, lse, n_valid,
                sync, partials, *tail]  # fmt: skip
    else:
        args = [logits, grad_arg, targets, losses, lse, n_valid, sync, partials, *tail]
    n_groups = most
    if not interpreting:
        # compile (no launch) to read registers / shared memory: the whole grid must be resident at once or
        # the barrier deadlocks (it would then time out into NaN)
        kernel = kernel_fn.warmup(*args, grid=(1,), **meta)
        capacity, occ = resident_programs(kernel, num_warps, logits.device)
        info.update(occ)
        n_groups = min(most, capacity // split)
        if n_groups < 1:
            return None
    kernel_fn[(n_groups * split,)](*args, **meta)
    losses.add_(sync[n_groups : n_groups + 1].view(torch.float32))  # NaN everywhere if a barrier timed out
    info.update(groups=n_groups, programs=n_groups * split, tagged=tagged, skew=skew)
    return info
