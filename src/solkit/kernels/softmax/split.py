"""Split-row softmax for wide rows (128k, 256k): one DRAM read of each row, the second read from L2.

Math as in :mod:`solkit.kernels.softmax.dispatch` (``y = exp(x - m) / s``; backward ``dx = y * (dy - sum(y * dy))``).

Why: the looped path reads a wide row twice (statistics, then output); with one 32-warp program per
SM, 132 rows are in flight (33 MB of 128256-wide bf16 rows, 67 MB at 256k, plus the outputs streaming
through), more than the L2 keeps, so nearly all of the second read comes from DRAM again (0.70 of the
one-read-one-write bound at 128k on the H200). Keeping row segments in registers instead (a cooperative
path) pays a partner synchronisation per row segment, and its per-row latency chain dominates.

Here ``S`` programs split each row into segments of ``N / S`` columns and stream them in chunks:

* pass 1: online max and sum over the segment (loads marked ``evict_last``), then the segment's
  ``(max, sum)`` is published in one 64-bit store (two fp32 bit patterns) into a slot pre-filled
  with NaN bits; readers poll the row's ``S`` slots until none is NaN: the data is its own flag, so
  one L2 round trip both synchronises and delivers (no counter, no fence);
* pass 2 runs one row *behind* pass 1 (``LOOKAHEAD``): after pass 1 of row ``r`` a program finishes
  row ``r - G``, whose partners published long ago, re-reading its segment, now from L2: the reuse
  distance is two segments per program (``2 x programs x N / S x e`` bytes over the GPU: 17 MB with
  264 programs and 16k-column bf16 segments), and writes ``y`` (``evict_first``).

DRAM traffic is the one-read-one-write minimum; L2 serves the second read. The backward publishes
``sum(y * dy)`` (one fp32, NaN-initialised) and re-reads ``y`` and ``dy``.

All programs of a group must be resident at once (grid <= programs that fit, registers capped by the
caller); waits are bounded, and a program whose partners never publish computes the whole row's
statistics itself (correct, slow), so a co-residency failure cannot hang.

Bytes per call: fwd read ``M*N*e`` + write ``M*N*e``; bwd read ``2*M*N*e`` + write ``M*N*e`` (from
DRAM; the partial slots, ``M*S*8`` bytes, are extra).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.kernels.common.device import interpreting, sm_count
from solkit.kernels.common.rows import register_cap
from solkit.kernels.softmax.streaming import dot_range, online_max_sum


@triton.jit
def _unpublished(v, PAIR: tl.constexpr):
    """Slots still NaN (not published): a ``(max, sum)`` pair is tested on its low half (the sum)."""
    if PAIR:
        lo = v.to(tl.int32).to(tl.float32, bitcast=True)  # truncation keeps the low half
        return lo != lo
    return v != v


@triton.jit
def _wait_published(slots, km, max_spin, PAIR: tl.constexpr):
    """Poll a row's ``SEGS`` slots (at most ``max_spin`` times) until none is NaN; returns the slots'
    values and how many were still missing (0: all published)."""
    v = tl.load(slots, mask=km, other=0, volatile=True)
    missing = tl.sum((km & _unpublished(v, PAIR)).to(tl.int32), axis=0)
    spins = 0
    while (missing > 0) & (spins < max_spin):
        v = tl.load(slots, mask=km, other=0, volatile=True)
        missing = tl.sum((km & _unpublished(v, PAIR)).to(tl.int32), axis=0)
        spins += 1
    return v, missing


@triton.jit
def _fwd_finish(x_ptr, y_ptr, part_ptr, row, n_cols, x_stride, y_stride, c0, c1, max_spin,
                SEGS: tl.constexpr, SEGS_P2: tl.constexpr, CHUNK: tl.constexpr):  # fmt: skip
    """Pass 2 of ``row``: wait for its ``SEGS`` published ``(max, sum)``, then write ``y`` over ``[c0, c1)``."""
    x_row = x_ptr + row.to(tl.int64) * x_stride
    cols = tl.arange(0, CHUNK)
    # The segment's first chunk is requested before the poll, so the two round trips overlap.
    x_next = tl.load(x_row + c0 + cols, mask=c0 + cols < c1, other=0.0, eviction_policy="evict_first")
    k = tl.arange(0, SEGS_P2)
    km = k < SEGS
    v, missing = _wait_published(part_ptr + row.to(tl.int64) * SEGS + k, km, max_spin, True)
    if missing == 0:
        lo = v.to(tl.int32).to(tl.float32, bitcast=True)
        hi = (v >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        ms = tl.where(km, hi, -float("inf"))
        m_all = tl.max(ms, axis=0)
        s_all = tl.sum(tl.where(km & (ms > -float("inf")), lo * tl.exp(ms - m_all), 0.0), axis=0)
    else:  # partners never published (not resident, or the interpreter): the whole row, here
        m_all, s_all = online_max_sum(x_row, 0, n_cols, CHUNK, "evict_first", True)
    inv_s = 1.0 / s_all
    y_row = y_ptr + row.to(tl.int64) * y_stride
    for start in range(c0, c1, CHUNK):
        x = x_next.to(tl.float32)
        nxt = start + CHUNK + cols
        x_next = tl.load(x_row + nxt, mask=nxt < c1, other=0.0, eviction_policy="evict_first")
        y = tl.exp(x - m_all) * inv_s
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=start + cols < c1,
                 eviction_policy="evict_first")  # fmt: skip


@triton.jit
def _bwd_finish(dy_ptr, y_ptr, dx_ptr, part_ptr, row, n_cols, dy_stride, y_stride, dx_stride, c0, c1, max_spin,
                SEGS: tl.constexpr, SEGS_P2: tl.constexpr, CHUNK: tl.constexpr):  # fmt: skip
    """Pass 2 of ``row``: wait for its ``SEGS`` published ``sum(y * dy)``, then write ``dx`` over ``[c0, c1)``."""
    r64 = row.to(tl.int64)
    y_row = y_ptr + r64 * y_stride
    dy_row = dy_ptr + r64 * dy_stride
    cols = tl.arange(0, CHUNK)
    # The segment's first chunk is requested before the poll, so the two round trips overlap.
    y_next = tl.load(y_row + c0 + cols, mask=c0 + cols < c1, other=0.0, eviction_policy="evict_first")
    dy_next = tl.load(dy_row + c0 + cols, mask=c0 + cols < c1, other=0.0, eviction_policy="evict_first")
    k = tl.arange(0, SEGS_P2)
    km = k < SEGS
    p, missing = _wait_published(part_ptr + r64 * SEGS + k, km, max_spin, False)
    if missing == 0:
        dot_all = tl.sum(tl.where(km, p, 0.0), axis=0)
    else:  # partners never published: the whole row's dot product, here
        dot_all = dot_range(y_row, dy_row, 0, n_cols, CHUNK, "evict_first", True)
    dx_row = dx_ptr + r64 * dx_stride
    for start in range(c0, c1, CHUNK):
        y, dy = y_next.to(tl.float32), dy_next.to(tl.float32)
        nxt = start + CHUNK + cols
        y_next = tl.load(y_row + nxt, mask=nxt < c1, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_row + nxt, mask=nxt < c1, other=0.0, eviction_policy="evict_first")
        dx = (y * (dy - dot_all)).to(dx_ptr.dtype.element_ty)
        tl.store(dx_row + start + cols, dx, mask=start + cols < c1, eviction_policy="evict_first")


@triton.jit
def _softmax_split_kernel(
    a_ptr, b_ptr, out_ptr, part_ptr, n_rows, n_cols, a_stride, b_stride, out_stride, seg_len, max_spin,
    BACKWARD: tl.constexpr, SEGS: tl.constexpr, SEGS_P2: tl.constexpr, CHUNK: tl.constexpr,
    LOOKAHEAD: tl.constexpr,
):  # fmt: skip
    """Forward: ``a`` = x (``b`` unused), ``out`` = y, the published partial is the segment's
    ``(max, sum)`` in one 64-bit slot. Backward: ``a`` = dy, ``b`` = y, ``out`` = dx, the partial is the
    segment's ``sum(y * dy)`` (fp32)."""
    # Program p owns segment p % SEGS of rows p // SEGS, p // SEGS + G, ... (G groups of SEGS programs).
    pid = tl.program_id(0)
    seg = pid % SEGS
    n_groups = tl.num_programs(0) // SEGS
    c0 = seg * seg_len
    c1 = tl.minimum(c0 + seg_len, n_cols)
    # LOOKAHEAD: pass 2 of a row runs one iteration after its pass 1 (one extra iteration at the end).
    for base in range(0, n_rows + LOOKAHEAD * n_groups, n_groups):
        row = base + pid // SEGS
        if row < n_rows:  # rows past the end: every program of the group skips them alike
            r64 = row.to(tl.int64)
            if BACKWARD:
                dot = dot_range(b_ptr + r64 * b_stride, a_ptr + r64 * a_stride, c0, c1, CHUNK, "evict_last", True)
                tl.store(part_ptr + r64 * SEGS + seg, dot)
            else:
                m_loc, s_loc = online_max_sum(a_ptr + r64 * a_stride, c0, c1, CHUNK, "evict_last", True)
                # sum in the low half, zero-extended (via uint32); max in the high half
                s_bits = s_loc.to(tl.int32, bitcast=True).to(tl.uint32).to(tl.int64)
                bits = (m_loc.to(tl.int32, bitcast=True).to(tl.int64) << 32) | s_bits
                tl.store(part_ptr + r64 * SEGS + seg, bits)  # one 64-bit store: max and sum together
        done = row - LOOKAHEAD * n_groups
        if (done >= 0) & (done < n_rows):
            if BACKWARD:
                _bwd_finish(a_ptr, b_ptr, out_ptr, part_ptr, done, n_cols, a_stride, b_stride, out_stride, c0, c1,
                            max_spin, SEGS, SEGS_P2, CHUNK)  # fmt: skip
            else:
                _fwd_finish(a_ptr, out_ptr, part_ptr, done, n_cols, a_stride, out_stride, c0, c1, max_spin,
                            SEGS, SEGS_P2, CHUNK)  # fmt: skip


def split_plan(n_rows: int, n_cols: int, segment: int, slots: int) -> tuple[int, int, int] | None:
    """``(grid, SEGS, seg_len)``: segments of at most ``segment`` columns, their count (from the minimum
    up to twice it) the one whose groups fill the most of the ``slots`` resident programs; None when
    one row needs more programs than fit."""
    lo = triton.cdiv(n_cols, segment)
    if lo > slots:
        return None
    best_used, segs = 0, lo
    for s in range(lo, min(2 * lo, slots) + 1):
        used = min(slots // s, n_rows) * s
        if used > best_used:
            best_used, segs = used, s
    # Segments in whole 16-element multiples (16-byte vectors); the last one may be shorter or empty.
    seg_len = triton.cdiv(triton.cdiv(n_cols, segs), 16) * 16
    groups = max(min(slots // segs, n_rows), 1)
    return groups * segs, segs, seg_len


def max_spin() -> int:
    """Polls before a program stops waiting for its partners and computes the row statistics itself: none
    under the interpreter (programs run one after another), 4096 on a GPU (milliseconds, far beyond a
    normal wait of a few microseconds)."""
    return 0 if interpreting() else 1 << 12


def launch_split(backward: bool, ptrs, strides, opts: dict, num_warps: int | None = None) -> bool:
    """Launch the split-row kernel on ``ptrs`` (forward: x, x, y; backward: dy, y, dx) with the options ``opts``
    (``segment``, ``chunk``, ``num_warps``, ``per_sm``, ``lookahead``); False, with nothing launched, when a row
    needs more programs than can be resident at once."""
    t = ptrs[0]
    n_rows, n_cols = t.shape
    plan = split_plan(n_rows, n_cols, opts["segment"], sm_count(t) * opts["per_sm"])
    if plan is None:
        return False
    grid, segs, seg_len = plan
    nw = num_warps or opts["num_warps"]
    if not backward:  # (max, sum) bit patterns; all ones = NaN = not published
        part = torch.full((n_rows * segs,), -1, dtype=torch.int64, device=t.device)
    else:
        part = torch.full((n_rows * segs,), float("nan"), dtype=torch.float32, device=t.device)
    _softmax_split_kernel[(grid,)](
        *ptrs, part, n_rows, n_cols, *strides, seg_len, max_spin(), BACKWARD=backward,
        SEGS=segs, SEGS_P2=triton.next_power_of_2(segs), CHUNK=min(opts["chunk"], triton.next_power_of_2(seg_len)),
        LOOKAHEAD=int(opts["lookahead"]), num_warps=nw, maxnreg=register_cap(opts["per_sm"], nw),
    )  # fmt: skip
    return True


@functools.cache
def _l2_bytes_of(index: int) -> int:
    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 50 * 2**20)


def l2_bytes(t: torch.Tensor) -> int:
    """L2 bytes of ``t``'s CUDA device (50 MiB when the driver does not say)."""
    return _l2_bytes_of(t.device.index if t.device.index is not None else torch.cuda.current_device())
