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

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.device import interpreting, sm_count
from solkit.kernels.common.exchange import L2E, LN2, chunk_layout, pack, pair_sums, resident_programs, unpack
from solkit.kernels.common.spin import poll_tagged, publish_tagged
from solkit.kernels.cross_entropy.chunks import (
    await_tagged,
    combine,
    load_words_row,
    on_timeout,
    slot,
    store_loss,
    store_target_grad,
    target_logit,
    word_chunk_geometry,
    zero_row,
)
from solkit.kernels.cross_entropy.packed import ce_lean_kernel, ce_packed_kernel


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
    return combine(ms, ss, False), sz, (arrived >= goal).to(tl.int32)


@triton.jit
def _exchange_tagged(partial_ptr, group, chunk, n_groups, k, m_c, s_c, sz, spin_budget,
                     SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    base = slot(partial_ptr, group, n_groups, k, SPLIT_P2, 2)
    publish_tagged(base, chunk, k, m_c, s_c, sz, SPLIT_P2, HAS_SMOOTHING)
    wm, ws, wz = poll_tagged(base, k, SPLIT, SPLIT_P2, HAS_SMOOTHING)
    return await_tagged(base, k, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING, False)


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
            store_target_grad(grad_ptr, row64, grad_row_stride, target, z_t, lse, p_scale, uniform, label_smoothing,
                               grad_scale)  # fmt: skip


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
            zero_row(loss_ptr, lse_ptr, g_row, row64, cols, col_mask, chunk, BLOCK, WRITE_GRAD)
        else:
            # read before this program arrives at the barrier, hence before any peer overwrites the row
            z_t = target_logit(logits_ptr, row64, logits_row_stride, target, n_cols)
            z, e, m_c, m_ref, s_c, sz = _chunk_stats(x, col_mask, HAS_SMOOTHING)
            if SPLIT > 1:
                if TAGGED:
                    lse, sz, ok = _exchange_tagged(partial_ptr, group, chunk, n_groups, k, m_c, s_c, sz, spin_budget,
                                                   SPLIT, SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
                else:
                    lse, sz, ok = _exchange_counted(partial_ptr, sync_ptr, group, chunk, n_groups, k, m_c, s_c, sz,
                                                    spin_budget, SPLIT, SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
                lse, spin_budget = on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
                k += 1
            else:
                lse = m_ref + tl.log2(s_c) * LN2
            _finish_row(loss_ptr, lse_ptr, grad_ptr, grad_row_stride, g_row, row64, cols, col_mask, chunk, col0,
                        col_end, target, n_cols, z_t, z, e, m_ref, lse, sz, grad_scale, label_smoothing, z_loss_scale,
                        WRITE_GRAD, KEEP_EXP)  # fmt: skip


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
        word_chunk_geometry(n_cols, chunk_cols, logits_row_stride, grad_row_stride, n_valid_ptr, SPLIT, WBLOCK, MEAN)
    )
    uniform = label_smoothing / n_cols * grad_scale
    spin_budget = max_spins
    # prologue: row r published, r + G and r + 2G in flight (r = group < n_rows: the launcher's grid)
    x0, t0 = load_words_row(logits_w_ptr, targets_ptr, group, n_rows, lw_stride, wcols, woffs, w_lim, W_PAD)
    x1, t1 = load_words_row(logits_w_ptr, targets_ptr, group + n_groups, n_rows, lw_stride, wcols, woffs, w_lim,
                             W_PAD)  # fmt: skip
    x2, t2 = load_words_row(logits_w_ptr, targets_ptr, group + 2 * n_groups, n_rows, lw_stride, wcols, woffs,
                             w_lim, W_PAD)  # fmt: skip
    zt0 = target_logit(logits_ptr, group.to(tl.int64), logits_row_stride, t0, n_cols)
    m_c, s_c, sz = pair_sums(x0, w_mask, IS_BF16, HAS_SMOOTHING)
    v0 = t0 != ignore_index
    k0 = 0
    if v0:
        publish_tagged(slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4), chunk, k0, m_c, s_c, sz, SPLIT_P2,
                        HAS_SMOOTHING)  # fmt: skip
    k1 = v0.to(tl.int32)
    for row in tl.range(group, n_rows, n_groups, loop_unroll_factor=UNROLL):
        row64 = tl.cast(row, tl.int64)
        r1 = row + n_groups
        x3, t3 = load_words_row(logits_w_ptr, targets_ptr, r1 + 2 * n_groups, n_rows, lw_stride, wcols, woffs,
                                 w_lim, W_PAD)  # fmt: skip
        xr = tl.load(logits_w_ptr + row64 * lw_stride + wcols, mask=w_mask, other=W_PAD)  # row r again: from L2
        base0 = slot(partial_ptr, group, n_groups, k0, SPLIT_P2, 4)
        wm, ws, wz = poll_tagged(base0, k0, SPLIT, SPLIT_P2, HAS_SMOOTHING)
        v1 = (r1 < n_rows) & (t1 != ignore_index)
        zt1 = target_logit(logits_ptr, tl.minimum(r1, n_rows - 1).to(tl.int64), logits_row_stride, t1, n_cols)
        m_c, s_c, sz = pair_sums(x1, w_mask, IS_BF16, HAS_SMOOTHING)
        if v1:
            publish_tagged(slot(partial_ptr, group, n_groups, k1, SPLIT_P2, 4), chunk, k1, m_c, s_c, sz,
                            SPLIT_P2, HAS_SMOOTHING)  # fmt: skip
        g_row_w = grad_w_ptr + row64 * gw_stride
        if v0:
            lse, sz_row, ok = await_tagged(base0, k0, wm, ws, wz, sz, spin_budget, SPLIT, SPLIT_P2,
                                            HAS_SMOOTHING, False)  # fmt: skip
            lse, spin_budget = on_timeout(ok, lse, spin_budget, sync_ptr + n_groups)
            owner, t_in = store_loss(loss_ptr, lse_ptr, row64, t0, n_cols, col0, col_end, zt0, lse, sz_row,
                                      label_smoothing, z_loss_scale, HAS_SMOOTHING)  # fmt: skip
            if WRITE_GRAD:
                p_scale = (1.0 + 2.0 * z_loss_scale * lse) * grad_scale
                lo, hi = unpack(xr, IS_BF16)
                g_lo = tl.exp2(lo * L2E - lse * L2E) * p_scale - uniform
                g_hi = tl.exp2(hi * L2E - lse * L2E) * p_scale - uniform
                tl.store(g_row_w + wcols, pack(g_lo, g_hi, IS_BF16, ASM), mask=w_mask)
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
    interp = interpreting() or logits.device.type != "cuda"
    if interp and split > 1 and groups is None:
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
        meta.update(IS_BF16=logits.dtype == torch.bfloat16, ASM=not interp, UNROLL=int(unroll))
    kernel_fn = _ce_split_reread_kernel if skew else _ce_split_kernel
    if skew >= 4:  # the packed kernels (:mod:`solkit.kernels.cross_entropy.packed`)
        kernel_fn = ce_packed_kernel if skew == 4 else ce_lean_kernel
        aligned = logits.data_ptr() % 16 == 0 and logits.stride(0) % 8 == 0  # the bulk prefetch's 16 bytes
        meta.update(PASS2_BF16=int(pass2_bf16), FULL=int(full_chunks), PF=l2_prefetch if aligned and not interp
                    else 0, **({"EARLY_LOAD": int(early_load)} if skew == 4 else {}))  # fmt: skip
        if full_chunks:  # chunks of exactly BLOCK columns but the last (loaded without masks)
            split, chunk_cols = triton.cdiv(n_cols, blk), blk
            meta.update(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2))
    if maxnreg and not interp:
        meta["maxnreg"] = maxnreg
    info: dict = {"split": split, "chunk_cols": chunk_cols, "block": blk}
    n_sms = sm_count(logits) if not interp else 1
    most = max(1, min(n_rows, groups or n_rows, 4 if interp else programs_per_sm * n_sms // split))
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
    if not interp:
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
