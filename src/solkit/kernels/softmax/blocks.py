"""Softmax kernels that need no other program: the single-block path (whole rows in registers) and the looped
path (rows streamed twice), forward and backward.

* **single block** (rows up to ``configs.yaml`` ``single.max_cols``): the whole row (``BLOCK_M`` rows for narrow
  ones) sits in registers; one read, one write;
* **looped** (wider rows): pass 1 streams the row in chunks keeping an online max and per-lane sums rescaled by it
  (:func:`~solkit.kernels.softmax.streaming.online_max_sum`, one exp per element); pass 2 walks the chunks in
  *reverse* order and writes ``exp(x - m) / s``. Both passes load the next chunk before working on the current
  one. Reversing makes the chunks read last in pass 1 the first re-read in pass 2, so part of the re-read hits L2;
  the rest is read from DRAM twice (with 128k-wide rows most of it, see docs/kernels/norms.md). Backward does the
  same with ``sum(y * dy)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels.softmax.streaming import dot_range, online_max_sum


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
    m_run, s_sum = online_max_sum(x_row, 0, n_cols, BLOCK_N, "evict_last", PREFETCH)
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
    dot = dot_range(y_row, dy_row, 0, n_cols, BLOCK_N, "evict_last", False)
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


def forward_single(x2: torch.Tensor, y2: torch.Tensor, block_m: int, block_n: int, num_warps: int, *, store_cs: int,
                   one_row: int, maxnreg: int | None = None) -> None:  # fmt: skip
    """``y2 = softmax(x2)`` by the single-block kernel (``block_m`` rows of ``block_n`` columns a program)."""
    n_rows, n_cols = x2.shape
    _softmax_fwd_kernel[(triton.cdiv(n_rows, block_m),)](
        x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
        STORE_CS=int(store_cs), ONE_ROW=int(block_m == 1 and one_row), num_warps=num_warps, maxnreg=maxnreg,
    )  # fmt: skip


def backward_single(dy2: torch.Tensor, y2: torch.Tensor, dx2: torch.Tensor, block_m: int, block_n: int,
                    num_warps: int, *, store_cs: int, maxnreg: int | None = None) -> None:  # fmt: skip
    """``dx2 = y2 * (dy2 - sum(y2 * dy2))`` by the single-block kernel."""
    n_rows, n_cols = y2.shape
    _softmax_bwd_kernel[(triton.cdiv(n_rows, block_m),)](
        dy2, y2, dx2, n_rows, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, STORE_CS=int(store_cs), num_warps=num_warps, maxnreg=maxnreg,
    )  # fmt: skip


def forward_looped(x2: torch.Tensor, y2: torch.Tensor, block_n: int, num_warps: int, *, prefetch: bool = True,
                   maxnreg: int | None = None) -> None:  # fmt: skip
    """``y2 = softmax(x2)`` by the looped kernel: one program per row, chunks of ``block_n`` columns."""
    n_rows, n_cols = x2.shape
    _softmax_fwd_looped_kernel[(n_rows,)](
        x2, y2, n_cols, x2.stride(0), y2.stride(0), PREFETCH=prefetch, BLOCK_N=block_n, num_warps=num_warps,
        maxnreg=maxnreg,
    )  # fmt: skip


def backward_looped(dy2: torch.Tensor, y2: torch.Tensor, dx2: torch.Tensor, block_n: int, num_warps: int, *,
                    prefetch: bool = True, maxnreg: int | None = None) -> None:  # fmt: skip
    """The looped kernel's backward."""
    n_rows, n_cols = y2.shape
    _softmax_bwd_looped_kernel[(n_rows,)](
        dy2, y2, dx2, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0), PREFETCH=prefetch, BLOCK_N=block_n,
        num_warps=num_warps, maxnreg=maxnreg,
    )  # fmt: skip
