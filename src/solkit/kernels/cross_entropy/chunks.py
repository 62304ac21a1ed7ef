"""Per-row pieces shared by the split-row cross-entropy kernels (:mod:`solkit.kernels.cross_entropy.split` and
:mod:`solkit.kernels.cross_entropy.packed`): the lse from the chunks' partials, the partial slots, the timeout
flag, the loss and target-gradient stores, and the geometry of a chunk read as 32-bit words.

Why one home: every kernel of the family finishes a row the same way (the program whose chunk holds the target
writes the loss, the lse and the target's gradient, so ``z_y`` is read from its own chunk and no cross-program
ordering is needed); only how the chunk's exponentials reach pass 2 differs between them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from solkit.kernels.common.exchange import L2E, LN2, fast_log2
from solkit.kernels.common.spin import spin_until_tagged, untag


@triton.jit
def combine(ms, ss, FAST_LOG: tl.constexpr):
    """lse from the chunks' (max, sum of exp relative to that max); ``FAST_LOG``: ``lg2.approx`` (GPU only)."""
    big = tl.max(ms, axis=0)
    return big + fast_log2(tl.sum(ss * tl.exp2(ms * L2E - big * L2E), axis=0), FAST_LOG) * LN2


@triton.jit
def slot(partial_ptr, group, n_groups, k, SPLIT_P2: tl.constexpr, SLOTS: tl.constexpr):
    return partial_ptr + ((k % SLOTS) * n_groups + group) * (3 * SPLIT_P2)


@triton.jit
def await_tagged(base, k, wm, ws, wz, sz, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                  HAS_SMOOTHING: tl.constexpr, FAST_LOG: tl.constexpr):  # fmt: skip
    """From a first read (``wm, ws, wz``), re-read the words until every tag matches (at most ``spin_budget``
    times: :func:`~solkit.kernels.common.spin.spin_until_tagged`); returns (lse, sum z over the row, 1 if all arrived
    else 0). ``FAST_LOG``: the row's log by ``lg2.approx``."""
    wm, ws, wz, ready = spin_until_tagged(base, k, wm, ws, wz, spin_budget, SPLIT, SPLIT_P2,
                                           3 if HAS_SMOOTHING else 2)  # fmt: skip
    if HAS_SMOOTHING:
        sz = tl.sum(untag(wz), axis=0)
    return combine(untag(wm), untag(ws), FAST_LOG), sz, ready


@triton.jit
def on_timeout(ok, lse, spin_budget, flag_ptr):
    """A peer never arrived: NaN for this row, the flag set (once per program; the launcher adds it to the
    losses), and no more waiting from now on."""
    if ok == 0:
        lse = lse + float("nan")
        if spin_budget > 0:
            tl.atomic_xchg(flag_ptr, 0x7FC00000)  # the int32 bits of a float NaN
        spin_budget = 0
    return lse, spin_budget


@triton.jit
def store_target_grad(grad_ptr, row, row_stride, target, z_t, lse, p_scale, uniform, label_smoothing, grad_scale):
    """The target column's gradient, which has ``- (1 - eps) k`` more than the chunk's formula gave it, stored
    over the chunk's value at ``grad_ptr + row * row_stride + target`` by the program that owns the column (one
    store per row, no per-element compare; the address is formed after the barrier, as the kernels had it)."""
    g_t = tl.exp2(z_t * L2E - lse * L2E) * p_scale - uniform - (1.0 - label_smoothing) * grad_scale
    tl.debug_barrier()  # after every thread's store of this chunk, the target's value wins
    tl.store(grad_ptr + row * row_stride + target, g_t.to(grad_ptr.dtype.element_ty))


@triton.jit
def store_loss(loss_ptr, lse_ptr, row64, target, n_cols, col0, col_end, z_t, lse, sz_row, label_smoothing,
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
def zero_row(loss_ptr, lse_ptr, g_row, row64, cols, col_mask, chunk, BLOCK: tl.constexpr, WRITE_GRAD: tl.constexpr):
    if chunk == 0:
        tl.store(loss_ptr + row64, 0.0)
        tl.store(lse_ptr + row64, 0.0)
    if WRITE_GRAD:
        tl.store(g_row + cols, tl.zeros([BLOCK], dtype=g_row.dtype.element_ty), mask=col_mask)


@triton.jit
def target_logit(logits_ptr, row64, logits_row_stride, target, n_cols):
    t_in = (target >= 0) & (target < n_cols)
    return tl.load(logits_ptr + row64 * logits_row_stride + tl.where(t_in, target, 0)).to(tl.float32)


@triton.jit
def word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT: tl.constexpr,
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
def load_words_row(logits_w_ptr, targets_ptr, row, n_rows, w_row_stride, wcols, woffs, w_lim, W_PAD: tl.constexpr):
    """A row's chunk as int32 words (-inf pairs past the last row) and its target."""
    w = tl.load(logits_w_ptr + tl.cast(row, tl.int64) * w_row_stride + wcols,
                mask=woffs < tl.where(row < n_rows, w_lim, 0), other=W_PAD)  # fmt: skip
    return w, tl.load(targets_ptr + tl.minimum(row, n_rows - 1)).to(tl.int32)
