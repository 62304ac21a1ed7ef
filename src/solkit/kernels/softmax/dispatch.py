"""Row softmax over the last dimension: Triton kernels, forward and backward, rows up to 256k wide.

Math, per row ``x`` of ``N`` elements, fp32 arithmetic, one rounding of the output:

    m  = max(x),   s = sum(exp(x - m)),   y = exp(x - m) / s
    backward:  dx = y * (dy - sum(y * dy))

Paths:

* **single block** (``N`` up to :data:`MAX_SINGLE_BLOCK_COLS`): the whole row (``BLOCK_M`` rows for
  narrow ones) sits in registers; one read, one write;
* **rows** (forward, 16-bit rows that tile exactly; :mod:`solkit.kernels.softmax.rows`): persistent programs
  hold a whole row as up to three power-of-two tiles of int32 words (14336 columns: ``(4 + 2 + 1) x 1024``
  words at 8 warps), no masked lanes, the next rows' loads in flight; ``rows`` True or a dict of options, or
  by default per ``_softmax_rows.ROWS_DEFAULT``;
* **looped** (wider rows): pass 1 streams the row in chunks keeping an online max (a scalar, one
  block reduction per chunk) and per-lane sums rescaled by it (``s <- s * exp(m_old - m_new) +
  exp(x - m_new)``, one exp per element); pass 2 walks the chunks in *reverse* order and writes
  ``exp(x - m) / s``. Both passes load the next chunk before working on the current one.
  Reversing makes the chunks read last in pass 1 the first re-read in pass 2, so part of the re-read
  hits L2; the rest is read from DRAM twice (with 128k-wide rows most of it, see docs/kernels/norms.md).
  Backward does the same with ``sum(y * dy)``;
* **packed** (wide rows; :mod:`solkit.kernels.softmax.packed`): ``S`` resident programs per row keep
  their chunk in registers (16-bit inputs as int32 pairs), exchange ``(max, sum)`` (backward:
  ``sum(y * dy)``) as tagged 64-bit words, and overlap the exchange with the next row's pass 1 and the
  loads of the two rows after it (plus one row of L2 bulk prefetch): one read, one write, the design of the
  packed cross-entropy kernel. Taken when ``packed`` is True or a dict of ``PACKED_CONFIG``
  overrides, or by default per :data:`PACKED_DEFAULT` (16-bit inputs, by row width) on a GPU;
* **TMA-staged packed** (forward, ``tma=True`` or a dict; :mod:`solkit.kernels.softmax.tma`): the packed
  exchange with each chunk a TMA box that Triton's pipeliner stages through shared memory, so the chunks in
  flight hold no registers;
* **re-read** (forward, ``reread=True`` or a dict; :mod:`solkit.kernels.softmax.reread`): the grouped exchange
  with no row held across it: pass 2 re-reads its chunk from L2 ``K`` rows after pass 1 read it;
* **split-row** (wide rows; :mod:`solkit.kernels.softmax.split`): programs split each row into
  segments, publish per-segment statistics, and re-read their segment from L2 for the output: one
  DRAM read. The default on a GPU when one row per SM would overflow the L2 (:data:`SPLIT_CONFIG`);
* **cooperative** (wide rows; ``coop=True``; measured 2-3x slower than looped, kept opt-in;
  :mod:`solkit.kernels.softmax.coop`): register-held segments, partials traded through a buffer and a
  per-row arrival counter.

Bytes per call (the minimum the benchmark scores against), ``M x N`` of ``e`` bytes:

    fwd: read M*N*e            write M*N*e
    bwd: read 2*M*N*e (y, dy)  write M*N*e
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.kernels.common.device import interpreting, sm_count
from solkit.kernels.common.rows import check_rows, register_cap, row_config, warps_for
from solkit.kernels.softmax.coop import (  # noqa: F401 (_coop_plan: re-exported for the tests)
    _coop_launch,
    _coop_plan,
    _max_spin,
    _softmax_bwd_coop_kernel,
    _softmax_fwd_coop_kernel,
)
from solkit.kernels.softmax.packed import (  # noqa: F401 (PACKED_DEFAULT, default_packed_options: re-exported)
    PACKED_DEFAULT,
    default_packed_options,
    packed_options,
    softmax_backward_packed,
    softmax_forward_packed,
)
from solkit.kernels.softmax.reread import reread_options, softmax_forward_reread
from solkit.kernels.softmax.rows import rows_options, softmax_forward_rows
from solkit.kernels.softmax.split import _dot_range, _online_max_sum, _softmax_split_kernel, split_plan
from solkit.kernels.softmax.tma import softmax_forward_tma, tma_options

#: Widest row kept whole in registers; wider rows take the looped path.
MAX_SINGLE_BLOCK_COLS = 16384
#: Single-block kernels: streaming (``.cs``) stores of the output by row block width (``BLOCK_N``; ``store_cs=None``
#: takes this), and (forward) one row per program as 1-D tensors (``one_row=None`` takes this) instead of a
#: ``[1, BLOCK_N]`` tile. H200 (session 5 round 2, 8192 x 14336 bf16): forward 127.0 us with streaming stores
#: against 133.9, backward 173.5 against 185.4; 1-D rows 128.4 (no gain kept).
SINGLE_STORE_CS = {16384: 1}
SINGLE_ONE_ROW = 0
#: Single-block backward: warps by row block width (``BLOCK_N``), where they differ from :func:`row_config`'s.
#: H200 round 1 (session 5, 8192 x 14336 bf16): 16 warps 175.9 us against 32 warps 193.1.
SINGLE_BWD_WARPS = {16384: 16}
#: Chunk widths (elements) of the looped path, forward and backward (H200 sweep, bf16, 128256-wide rows:
#: one 32-warp program per SM keeps the rows in flight few enough for the reverse pass to hit L2).
LOOP_BLOCK = 16384
LOOP_BLOCK_BWD = 32768
#: Cooperative path: ``default`` (taken when ``coop=None``, on a GPU), the widest row segment a program
#: keeps in registers (the backward holds y and dy), warps, resident programs per SM, and rows loaded
#: ahead beyond the one whose partial is posted next (1 or 2).
#: Split-row path (:mod:`solkit.kernels.softmax.split`): ``default`` (True, False, or ``"auto"``: taken
#: when ``split=None`` on a GPU if one row per SM would overflow the L2), widest row segment per
#: program, chunk width, warps, programs per SM, and whether pass 2 runs one row behind pass 1.
SPLIT_CONFIG = {  # round-3b sweep winners (H200, bf16, 128256- and 262144-wide rows)
    "fwd": {"default": "auto", "segment": 65536, "chunk": 8192, "num_warps": 16, "per_sm": 2, "lookahead": 0},
    "bwd": {"default": "auto", "segment": 16384, "chunk": 4096, "num_warps": 16, "per_sm": 2, "lookahead": 1},
}
COOP_CONFIG = {
    "fwd": {"default": False, "segment": 16384, "num_warps": 32, "per_sm": 1, "lookahead": 1},
    "bwd": {"default": False, "segment": 8192, "num_warps": 32, "per_sm": 1, "lookahead": 1},
}


@triton.jit
def _store_rows(ptrs, v, mask, STORE_CS: tl.constexpr):
    """``STORE_CS``: streaming stores (``.cs``: the written lines leave L2 first)."""
    if STORE_CS:
        tl.store(ptrs, v, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptrs, v, mask=mask)


@triton.jit
def _softmax_fwd_kernel(
    x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STORE_CS: tl.constexpr = 0, ONE_ROW: tl.constexpr = 0,
):  # fmt: skip
    if ONE_ROW:  # BLOCK_M = 1 as 1-D tensors: padding loaded as -inf, no select
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_N)
        xr = tl.load(x_ptr + row * x_stride + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
        er = tl.exp(xr - tl.max(xr, axis=0))
        yr = er * (1.0 / tl.sum(er, axis=0))
        _store_rows(y_ptr + row * y_stride + offs, yr.to(y_ptr.dtype.element_ty), offs < n_cols, STORE_CS)
    else:
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        rows64 = rows.to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        # Padding columns get -inf (probability 0); rows past the end stay 0 so they never compute inf - inf.
        x = tl.where((cols < n_cols)[None, :], x, -float("inf"))
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e * (1.0 / tl.sum(e, axis=1))[:, None]
        _store_rows(y_ptr + rows64[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask, STORE_CS)


@triton.jit
def _softmax_bwd_kernel(
    dy_ptr, y_ptr, dx_ptr, n_rows, n_cols, dy_stride, y_stride, dx_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STORE_CS: tl.constexpr = 0,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    y = tl.load(y_ptr + rows64[:, None] * y_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows64[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    _store_rows(dx_ptr + rows64[:, None] * dx_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask, STORE_CS)


@triton.jit
def _softmax_fwd_looped_kernel(
    x_ptr, y_ptr, n_cols, x_stride, y_stride, PREFETCH: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    cols = tl.arange(0, BLOCK_N)
    neg_inf = -float("inf")
    # Pass 1: online max and sum (the next chunk loaded before this one is reduced, with PREFETCH).
    m_run, s_sum = _online_max_sum(x_row, 0, n_cols, BLOCK_N, "evict_last", PREFETCH)
    inv_s = 1.0 / s_sum
    # Pass 2, in reverse: the chunks read last in pass 1 are the likeliest still in L2.
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    x_next = tl.load(x_row + last + cols, mask=last + cols < n_cols, other=neg_inf, eviction_policy="evict_first")
    for i in range(0, n_chunks):
        start = (n_chunks - 1 - i) * BLOCK_N
        mask = start + cols < n_cols
        if PREFETCH:
            x = x_next
            prv = start - BLOCK_N + cols
            x_next = tl.load(
                x_row + prv, mask=(prv >= 0) & (prv < n_cols), other=neg_inf, eviction_policy="evict_first"
            )
        else:
            x = tl.load(x_row + start + cols, mask=mask, other=neg_inf, eviction_policy="evict_first")
        y = tl.exp(x.to(tl.float32) - m_run) * inv_s
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")


@triton.jit
def _softmax_bwd_looped_kernel(
    dy_ptr, y_ptr, dx_ptr, n_cols, dy_stride, y_stride, dx_stride, PREFETCH: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    dy_row = dy_ptr + row * dy_stride
    y_row = y_ptr + row * y_stride
    dx_row = dx_ptr + row * dx_stride
    cols = tl.arange(0, BLOCK_N)
    # Pass 1 without a prefetch: with 32k-column chunks a second y/dy buffer would not fit in registers.
    dot = _dot_range(y_row, dy_row, 0, n_cols, BLOCK_N, "evict_last", False)
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    y_next = tl.load(y_row + last + cols, mask=last + cols < n_cols, other=0.0, eviction_policy="evict_first")
    dy_next = tl.load(dy_row + last + cols, mask=last + cols < n_cols, other=0.0, eviction_policy="evict_first")
    for i in range(0, n_chunks):  # reverse, as in the forward
        start = (n_chunks - 1 - i) * BLOCK_N
        mask = start + cols < n_cols
        if PREFETCH:
            y, dy = y_next.to(tl.float32), dy_next.to(tl.float32)
            prv = start - BLOCK_N + cols
            pmask = (prv >= 0) & (prv < n_cols)
            y_next = tl.load(y_row + prv, mask=pmask, other=0.0, eviction_policy="evict_first")
            dy_next = tl.load(dy_row + prv, mask=pmask, other=0.0, eviction_policy="evict_first")
        else:
            y = tl.load(y_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            dy = tl.load(dy_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        dx = (y * (dy - dot)).to(dx_ptr.dtype.element_ty)
        tl.store(dx_row + start + cols, dx, mask=mask, eviction_policy="evict_first")


def _plan(n_cols: int, elem_bytes: int, max_single: int, loop_block: int, block_m, num_warps):
    """``(looped, BLOCK_M, BLOCK_N, num_warps)`` for a row width."""
    if n_cols <= max_single:
        bm, bn, nw = row_config(n_cols, elem_bytes)
        if block_m:
            bm, nw = block_m, max(warps_for(block_m * bn, elem_bytes), 4)
        return False, bm, bn, num_warps or nw
    return True, 1, loop_block, num_warps or max(warps_for(loop_block, elem_bytes), 4)


def _use_coop(coop, cfg: dict, t: torch.Tensor) -> bool:
    """``None`` follows the measured default, on a GPU only (the interpreter runs programs one by one)."""
    if coop is None:
        return bool(cfg["default"]) and t.is_cuda and not interpreting()
    return bool(coop)


def _split_launch(backward: bool, ptrs, strides, cfg: dict, split, num_warps) -> bool:
    """Launch the split-row kernel on ``ptrs`` (forward: x, x, y; backward: dy, y, dx) with options
    ``cfg`` updated by ``split`` when it is a dict; False, with nothing launched, when a row needs
    more programs than can be resident at once."""
    opts = {**cfg, **(split if isinstance(split, dict) else {})}
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
        *ptrs, part, n_rows, n_cols, *strides, seg_len, _max_spin(), BACKWARD=backward,
        SEGS=segs, SEGS_P2=triton.next_power_of_2(segs), CHUNK=min(opts["chunk"], triton.next_power_of_2(seg_len)),
        LOOKAHEAD=int(opts["lookahead"]), num_warps=nw, maxnreg=register_cap(opts["per_sm"], nw),
    )  # fmt: skip
    return True


@functools.cache
def _l2_bytes(index: int) -> int:
    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 50 * 2**20)


def _split_by_default(t: torch.Tensor) -> bool:
    """``SPLIT_CONFIG`` ``"auto"``: split when one row per SM (the looped path's rows in flight) would
    not fit in the L2, so the looped path's second read would come from DRAM. H200 (132 SMs, 60 MB
    L2, bf16): 128256-wide rows (34 MB) stay looped, 262144-wide rows (69 MB) split — the round-3b
    measurement: looped 709 us against split 723 at 128k, split 384 against looped 403 at 256k."""
    if not t.is_cuda or interpreting():
        return False
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return sm_count(t) * t.shape[-1] * t.element_size() > _l2_bytes(index)


def _wide_path(coop, split, direction: str, t: torch.Tensor) -> str:
    """Path of a row too wide for one block: an explicit ``coop`` or ``split`` wins, then the defaults."""
    if coop:
        return "coop"
    if split is None and SPLIT_CONFIG[direction]["default"] == "auto":
        if _split_by_default(t):
            return "split"
    elif _use_coop(split, SPLIT_CONFIG[direction], t):
        return "split"
    if _use_coop(coop, COOP_CONFIG[direction], t):
        return "coop"
    return "looped"


def softmax_forward(
    x: torch.Tensor,
    *,
    max_single_block: int = MAX_SINGLE_BLOCK_COLS,
    loop_block: int = LOOP_BLOCK,
    block_m: int | None = None,
    num_warps: int | None = None,
    maxnreg: int | None = None,
    prefetch: bool = True,
    coop: bool | None = None,
    coop_segment: int | None = None,
    coop_per_sm: int | None = None,
    coop_lookahead: int | None = None,
    split: bool | dict | None = None,
    packed: bool | dict | None = None,
    store_cs: bool | None = None,
    one_row: bool | None = None,
    rows: bool | dict | None = None,
    tma: bool | dict | None = None,
    reread: bool | dict | None = None,
) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any leading shape).

    ``rows`` True or a dict of ``_softmax_rows.ROWS_CONFIG`` overrides takes the exact-tile whole-row path where
    the rows tile exactly (None: ``_softmax_rows.ROWS_DEFAULT``); ``tma`` (True or a dict) the TMA-staged packed
    forward (``_softmax_tma``; None: ``_softmax_tma.TMA_DEFAULT``); ``reread`` (True or a dict) the grouped forward
    whose pass 2 re-reads its chunk from L2 (``_softmax_reread``; None: ``_softmax_reread.REREAD_DEFAULT``).
    ``packed`` True or a dict of ``_softmax_packed.PACKED_CONFIG`` overrides takes the packed path at any width
    (None: :data:`PACKED_DEFAULT`).
    Rows wider than ``max_single_block`` take the cooperative path when ``coop`` is True, the split-row path when
    ``split`` is True or a dict of :data:`SPLIT_CONFIG` overrides (None: the measured defaults), else the looped
    one."""
    x2 = check_rows(x, "softmax input", max_cols=None)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    qopts = reread_options(reread, (tma, rows, packed, coop, split), x2)
    if qopts is not None and softmax_forward_reread(x2, y2, **qopts) is not None:
        return y2.view(x.shape)
    topts = tma_options(tma, (reread, rows, packed, coop, split), x2)
    if topts is not None and softmax_forward_tma(x2, y2, **topts) is not None:
        return y2.view(x.shape)
    ropts = rows_options(rows, packed, coop, split, x2)
    if ropts is not None and softmax_forward_rows(x2, y2, **ropts) is not None:
        return y2.view(x.shape)
    opts = packed_options(packed, coop, split, "fwd", x2)
    if opts is not None and softmax_forward_packed(x2, y2, **opts) is not None:
        return y2.view(x.shape)
    looped, bm, bn, nw = _plan(n_cols, x2.element_size(), max_single_block, loop_block, block_m, num_warps)
    cfg = COOP_CONFIG["fwd"]
    path = _wide_path(coop, split, "fwd", x2) if looped else "single"
    if path == "split":
        strides = (x2.stride(0), x2.stride(0), y2.stride(0))
        if _split_launch(False, (x2, x2, y2), strides, SPLIT_CONFIG["fwd"], split, num_warps):
            return y2.view(x.shape)
    elif path == "coop":
        strides = (x2.stride(0), y2.stride(0))
        if _coop_launch(
            _softmax_fwd_coop_kernel, (x2, y2), strides, 2, cfg, coop_segment, num_warps, coop_per_sm, coop_lookahead
        ):
            return y2.view(x.shape)
    if looped:
        _softmax_fwd_looped_kernel[(n_rows,)](
            x2, y2, n_cols, x2.stride(0), y2.stride(0), PREFETCH=prefetch, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg
        )
    else:
        _softmax_fwd_kernel[(triton.cdiv(n_rows, bm),)](
            x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), BLOCK_M=bm, BLOCK_N=bn,
            STORE_CS=int(SINGLE_STORE_CS.get(bn, 0) if store_cs is None else store_cs),
            ONE_ROW=int(bm == 1 and (SINGLE_ONE_ROW if one_row is None else one_row)), num_warps=nw, maxnreg=maxnreg,
        )  # fmt: skip
    return y2.view(x.shape)


def softmax_backward(
    dy: torch.Tensor,
    y: torch.Tensor,
    *,
    max_single_block: int = MAX_SINGLE_BLOCK_COLS,
    loop_block: int = LOOP_BLOCK_BWD,
    block_m: int | None = None,
    num_warps: int | None = None,
    maxnreg: int | None = None,
    prefetch: bool = True,
    coop: bool | None = None,
    coop_segment: int | None = None,
    coop_per_sm: int | None = None,
    coop_lookahead: int | None = None,
    split: bool | dict | None = None,
    packed: bool | dict | None = None,
    store_cs: bool | None = None,
) -> torch.Tensor:
    """Gradient of softmax: ``dx = y * (dy - sum(y * dy))`` over the last dimension (paths as in the forward)."""
    y2 = check_rows(y, "softmax saved output", max_cols=None)
    dy2 = check_rows(dy, "softmax grad_output", max_cols=None)
    n_rows, n_cols = y2.shape
    dx2 = torch.empty_like(y2)
    opts = packed_options(packed, coop, split, "bwd", y2)
    if opts is not None and softmax_backward_packed(dy2, y2, dx2, **opts) is not None:
        return dx2.view(y.shape)
    looped, bm, bn, nw = _plan(n_cols, y2.element_size(), max_single_block, loop_block, block_m, num_warps)
    if not looped and bm == 1 and not (num_warps or block_m):
        nw = SINGLE_BWD_WARPS.get(bn, nw)
    cfg = COOP_CONFIG["bwd"]
    path = _wide_path(coop, split, "bwd", y2) if looped else "single"
    strides = (dy2.stride(0), y2.stride(0), dx2.stride(0))
    if path == "split":
        if _split_launch(True, (dy2, y2, dx2), strides, SPLIT_CONFIG["bwd"], split, num_warps):
            return dx2.view(y.shape)
    elif path == "coop":
        args = (strides, 1, cfg, coop_segment, num_warps, coop_per_sm, coop_lookahead)
        if _coop_launch(_softmax_bwd_coop_kernel, (dy2, y2, dx2), *args):
            return dx2.view(y.shape)
    if looped:
        _softmax_bwd_looped_kernel[(n_rows,)](
            dy2, y2, dx2, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0),
            PREFETCH=prefetch, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg,
        )  # fmt: skip
    else:
        _softmax_bwd_kernel[(triton.cdiv(n_rows, bm),)](
            dy2, y2, dx2, n_rows, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0),
            BLOCK_M=bm, BLOCK_N=bn, STORE_CS=int(SINGLE_STORE_CS.get(bn, 0) if store_cs is None else store_cs),
            num_warps=nw, maxnreg=maxnreg,
        )  # fmt: skip
    return dx2.view(y.shape)


class SoftmaxFunction(torch.autograd.Function):
    """Autograd wrapper of :func:`softmax_forward` / :func:`softmax_backward` (last dimension)."""

    @staticmethod
    def forward(ctx, x):
        y = softmax_forward(x)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(dy, y)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Differentiable softmax along ``dim`` (the last dimension is native; others are moved there, a copy)."""
    if dim in (-1, x.dim() - 1):
        return SoftmaxFunction.apply(x)
    return SoftmaxFunction.apply(x.movedim(dim, -1).contiguous()).movedim(-1, dim)


class Softmax(torch.nn.Module):
    """Drop-in ``torch.nn.Softmax(dim)``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
