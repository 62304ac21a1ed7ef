"""Lab: the cooperative wide-row softmax (measured 2-3x slower than the product's looped path; never dispatched:
run it through :func:`softmax_forward_coop` / :func:`softmax_backward_coop`).

``S`` resident programs split each row into register-held segments and trade partial ``(max, sum)`` (backward:
``sum(y * dy)``) through a small buffer and a per-row arrival counter (release atomic, acquire polls), so the
row is read from DRAM once. Software-pipelined: a program posts the partial of its next row before waiting for
the current row's partners, and keeps the loads of the ``LOOKAHEAD`` (1 or 2) rows after that in flight. ``S``
is the segment count whose groups fill the most resident slots (:func:`~solkit.kernels.softmax.split.split_plan`).
Waits are bounded; a program whose partners do not arrive computes the statistics itself (correct, slow).

Bytes per call, ``M x N`` of ``e`` bytes: forward read ``M N e``, write ``M N e``; backward read ``2 M N e``,
write ``M N e`` (partials and counters: ``O(M S)``, in L2).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels.common.device import sm_count
from solkit.kernels.common.rows import check_rows, register_cap
from solkit.kernels.softmax.split import max_spin, split_plan
from solkit.kernels.softmax.streaming import dot_range, online_max_sum

#: Launch defaults: the widest row segment a program keeps in registers (the backward holds y and dy), warps,
#: resident programs per SM, and rows loaded ahead beyond the one whose partial is posted next (1 or 2).
COOP_CONFIG = {
    "fwd": {"segment": 16384, "num_warps": 32, "per_sm": 1, "lookahead": 1},
    "bwd": {"segment": 8192, "num_warps": 32, "per_sm": 1, "lookahead": 1},
}


@triton.jit
def _post_partial(cnt_ptr, row):
    """Announce that this program's partial for ``row`` is stored: the barrier orders every thread's
    partial stores before the release increment of the row's arrival counter."""
    tl.debug_barrier()
    tl.atomic_add(cnt_ptr + row, 1, sem="release")


@triton.jit
def _wait_for_segments(cnt_ptr, row, SEGS: tl.constexpr, max_spin):
    """Wait (at most ``max_spin`` polls) until all ``SEGS`` programs posted ``row``'s partials.

    The acquire poll orders the partner partials before the loads that follow. Returns True when
    all arrived; False tells the caller to compute the row statistics itself.
    """
    cnt = tl.atomic_add(cnt_ptr + row, 0, sem="acquire")
    spins = 0
    while (cnt < SEGS) & (spins < max_spin):
        cnt = tl.atomic_add(cnt_ptr + row, 0, sem="acquire")
        spins += 1
    return cnt >= SEGS


@triton.jit
def _post_max_sum(x, part_ptr, cnt_ptr, row, seg, SEGS: tl.constexpr):
    """Store the segment's ``(max, sum(exp(x - max)))`` for ``row`` and announce it."""
    m_loc = tl.max(x, axis=0)
    s_loc = tl.sum(tl.exp(x - tl.where(m_loc == -float("inf"), 0.0, m_loc)), axis=0)
    tl.store(part_ptr + (row * SEGS + seg) * 2, m_loc)
    tl.store(part_ptr + (row * SEGS + seg) * 2 + 1, s_loc)
    _post_partial(cnt_ptr, row)


@triton.jit
def _seg_load(ptr, row, stride, cols, cmask, offs, n_rows, other):
    """This program's segment of ``row`` (masked out past the last row: phantom rows). The scalar
    condition is broadcast explicitly (``offs * 0 + ...``): the interpreter needs vector masks."""
    return tl.load(ptr + row.to(tl.int64) * stride + cols, mask=cmask & (offs * 0 + row < n_rows), other=other)


@triton.jit
def _softmax_fwd_coop_kernel(
    x_ptr, y_ptr, cnt_ptr, part_ptr, n_rows, n_cols, x_stride, y_stride, seg_len, max_spin,
    SEGS: tl.constexpr, SEGS_P2: tl.constexpr, BLOCK_N: tl.constexpr, FB_BLOCK: tl.constexpr,
    LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    # Program p owns segment p % SEGS of rows p // SEGS, p // SEGS + G, ...: the SEGS programs of a group
    # walk the same rows, keep their segment in registers, and trade (max, sum) through memory, so x
    # is read from DRAM once. Software pipeline: while row r is finished (wait for its partners, write
    # y), the partial of row r + G is already posted and rows up to r + (1 + LOOKAHEAD) G are being
    # loaded, so a program almost never finds its partners missing and always has loads in flight. A
    # program that waits too long (partners not resident, or the interpreter running programs one by
    # one) computes the row statistics itself instead.
    pid = tl.program_id(0)
    seg = pid % SEGS
    n_groups = tl.num_programs(0) // SEGS
    offs = tl.arange(0, BLOCK_N)
    cols = seg * seg_len + offs
    cmask = (offs < seg_len) & (cols < n_cols)
    neg_inf = -float("inf")
    first = pid // SEGS
    # Rows past the end are phantoms: loads and stores masked, their sync on spare counters (the
    # buffers have n_rows + 2G rows).
    x_cur = _seg_load(x_ptr, first, x_stride, cols, cmask, offs, n_rows, neg_inf)
    _post_max_sum(x_cur.to(tl.float32), part_ptr, cnt_ptr, first, seg, SEGS)
    x_nxt = _seg_load(x_ptr, first + n_groups, x_stride, cols, cmask, offs, n_rows, neg_inf)
    if LOOKAHEAD == 2:
        x_nn = _seg_load(x_ptr, first + 2 * n_groups, x_stride, cols, cmask, offs, n_rows, neg_inf)
    for base in range(0, n_rows, n_groups):
        row = base + first
        x_ahead = _seg_load(x_ptr, row + (1 + LOOKAHEAD) * n_groups, x_stride, cols, cmask, offs, n_rows, neg_inf)
        _post_max_sum(x_nxt.to(tl.float32), part_ptr, cnt_ptr, row + n_groups, seg, SEGS)
        x = x_cur.to(tl.float32)
        x_row = x_ptr + row.to(tl.int64) * x_stride
        if _wait_for_segments(cnt_ptr, row, SEGS, max_spin):
            k = tl.arange(0, SEGS_P2)
            idx = (row * SEGS + k) * 2
            ms = tl.load(part_ptr + idx, mask=k < SEGS, other=neg_inf, cache_modifier=".cg")
            m_all = tl.max(ms, axis=0)
            ss = tl.load(part_ptr + idx + 1, mask=k < SEGS, other=0.0, cache_modifier=".cg")
            s_all = tl.sum(tl.where(k < SEGS, ss * tl.exp(ms - m_all), 0.0), axis=0)
        else:  # narrow chunks: the segments and their prefetch stay in registers; a phantom row reads nothing
            m_all, s_all = online_max_sum(x_row, 0, tl.where(row < n_rows, n_cols, 0), FB_BLOCK, "", False)
        y = tl.exp(x - m_all) * (1.0 / s_all)
        row_ok = offs * 0 + row < n_rows
        tl.store(y_ptr + row.to(tl.int64) * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=cmask & row_ok)
        x_cur = x_nxt
        if LOOKAHEAD == 2:
            x_nxt = x_nn
            x_nn = x_ahead
        else:
            x_nxt = x_ahead


@triton.jit
def _softmax_bwd_coop_kernel(
    dy_ptr, y_ptr, dx_ptr, cnt_ptr, part_ptr, n_rows, n_cols, dy_stride, y_stride, dx_stride, seg_len, max_spin,
    SEGS: tl.constexpr, SEGS_P2: tl.constexpr, BLOCK_N: tl.constexpr, FB_BLOCK: tl.constexpr,
    LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    # Same partition and pipeline as the forward; the partial traded is sum(y * dy).
    pid = tl.program_id(0)
    seg = pid % SEGS
    n_groups = tl.num_programs(0) // SEGS
    offs = tl.arange(0, BLOCK_N)
    cols = seg * seg_len + offs
    cmask = (offs < seg_len) & (cols < n_cols)
    first = pid // SEGS
    y_cur = _seg_load(y_ptr, first, y_stride, cols, cmask, offs, n_rows, 0.0)
    dy_cur = _seg_load(dy_ptr, first, dy_stride, cols, cmask, offs, n_rows, 0.0)
    tl.store(part_ptr + first * SEGS + seg, tl.sum(y_cur.to(tl.float32) * dy_cur.to(tl.float32), axis=0))
    _post_partial(cnt_ptr, first)
    y_nxt = _seg_load(y_ptr, first + n_groups, y_stride, cols, cmask, offs, n_rows, 0.0)
    dy_nxt = _seg_load(dy_ptr, first + n_groups, dy_stride, cols, cmask, offs, n_rows, 0.0)
    if LOOKAHEAD == 2:
        y_nn = _seg_load(y_ptr, first + 2 * n_groups, y_stride, cols, cmask, offs, n_rows, 0.0)
        dy_nn = _seg_load(dy_ptr, first + 2 * n_groups, dy_stride, cols, cmask, offs, n_rows, 0.0)
    for base in range(0, n_rows, n_groups):
        row = base + first
        ahead = row + (1 + LOOKAHEAD) * n_groups
        y_ahead = _seg_load(y_ptr, ahead, y_stride, cols, cmask, offs, n_rows, 0.0)
        dy_ahead = _seg_load(dy_ptr, ahead, dy_stride, cols, cmask, offs, n_rows, 0.0)
        tl.store(part_ptr + (row + n_groups) * SEGS + seg,
                 tl.sum(y_nxt.to(tl.float32) * dy_nxt.to(tl.float32), axis=0))  # fmt: skip
        _post_partial(cnt_ptr, row + n_groups)
        if _wait_for_segments(cnt_ptr, row, SEGS, max_spin):
            k = tl.arange(0, SEGS_P2)
            dot = tl.sum(tl.load(part_ptr + row * SEGS + k, mask=k < SEGS, other=0.0, cache_modifier=".cg"), axis=0)
        else:  # the whole row's dot product, here (a phantom row reads nothing)
            r64 = row.to(tl.int64)
            n_valid = tl.where(row < n_rows, n_cols, 0)
            dot = dot_range(y_ptr + r64 * y_stride, dy_ptr + r64 * dy_stride, 0, n_valid, FB_BLOCK, "", False)
        dx = (y_cur.to(tl.float32) * (dy_cur.to(tl.float32) - dot)).to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + row.to(tl.int64) * dx_stride + cols, dx, mask=cmask & (offs * 0 + row < n_rows))
        y_cur, dy_cur = y_nxt, dy_nxt
        if LOOKAHEAD == 2:
            y_nxt, dy_nxt = y_nn, dy_nn
            y_nn, dy_nn = y_ahead, dy_ahead
        else:
            y_nxt, dy_nxt = y_ahead, dy_ahead


def coop_plan(
    n_rows: int, n_cols: int, t: torch.Tensor, seg_block: int, per_sm: int
) -> tuple[int, int, int, int] | None:
    """``(grid, SEGS, seg_len, BLOCK_N)`` of the cooperative path, or None when a row needs more
    programs than can be resident at once: :func:`split_plan`'s segments (the count that fills the most
    of the ``per_sm x SMs`` resident slots: 128256-wide rows on 132 SMs take 11 segments x 12 groups,
    not 8 x 16) of at most ``seg_block`` columns, each held whole in registers."""
    plan = split_plan(n_rows, n_cols, seg_block, sm_count(t) * max(per_sm, 1))
    return None if plan is None else (*plan, triton.next_power_of_2(plan[2]))


def _coop_buffers(rows: int, segs: int, per_seg: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed arrival counters and the fp32 partials of the cooperative path (``rows`` with phantoms)."""
    cnt = torch.zeros(rows, dtype=torch.int32, device=device)
    return cnt, torch.empty(rows * segs * per_seg, dtype=torch.float32, device=device)


def _coop_launch(kernel, ptrs, strides, per_seg, cfg, coop_segment, num_warps, coop_per_sm, lookahead) -> bool:
    """Launch a cooperative kernel over the 2-D tensors ``ptrs`` (inputs then output); False, with
    nothing launched, when a row needs more programs than can be resident at once."""
    t = ptrs[0]
    n_rows, n_cols = t.shape
    per_sm = coop_per_sm or cfg["per_sm"]
    num_warps = num_warps or cfg["num_warps"]
    plan = coop_plan(n_rows, n_cols, t, coop_segment or cfg["segment"], per_sm)
    if plan is None:
        return False
    grid, segs, seg_len, bn = plan
    # Phantom rows: every group runs cdiv(n_rows, G) rows and posts partials two rows ahead.
    cnt, part = _coop_buffers(n_rows + 2 * (grid // segs), segs, per_seg, t.device)
    kernel[(grid,)](
        *ptrs, cnt, part, n_rows, n_cols, *strides, seg_len, max_spin(),
        SEGS=segs, SEGS_P2=triton.next_power_of_2(segs), BLOCK_N=bn, FB_BLOCK=min(bn, 2048),
        LOOKAHEAD=lookahead or cfg["lookahead"],
        # Registers capped so that per_sm programs fit on every SM: all must be resident at once.
        num_warps=num_warps, maxnreg=register_cap(per_sm, num_warps),
    )  # fmt: skip
    return True


def softmax_forward_coop(x: torch.Tensor, *, segment: int | None = None, num_warps: int | None = None,
                         per_sm: int | None = None, lookahead: int | None = None) -> torch.Tensor | None:  # fmt: skip
    """Softmax over the last dimension of ``x`` by the cooperative kernel, or None (nothing launched) when a row
    needs more programs than can be resident at once."""
    x2 = check_rows(x, "softmax input", max_cols=None)
    y2 = torch.empty_like(x2)
    launched = _coop_launch(_softmax_fwd_coop_kernel, (x2, y2), (x2.stride(0), y2.stride(0)), 2, COOP_CONFIG["fwd"],
                            segment, num_warps, per_sm, lookahead)  # fmt: skip
    return y2.view(x.shape) if launched else None


def softmax_backward_coop(dy: torch.Tensor, y: torch.Tensor, *, segment: int | None = None,
                          num_warps: int | None = None, per_sm: int | None = None,
                          lookahead: int | None = None) -> torch.Tensor | None:  # fmt: skip
    """``dx = y * (dy - sum(y * dy))`` by the cooperative kernel, or None when it cannot be resident."""
    y2 = check_rows(y, "softmax saved output", max_cols=None)
    dy2 = check_rows(dy, "softmax grad_output", max_cols=None)
    dx2 = torch.empty_like(y2)
    strides = (dy2.stride(0), y2.stride(0), dx2.stride(0))
    launched = _coop_launch(_softmax_bwd_coop_kernel, (dy2, y2, dx2), strides, 1, COOP_CONFIG["bwd"], segment,
                            num_warps, per_sm, lookahead)  # fmt: skip
    return dx2.view(y.shape) if launched else None
