"""Row softmax over the last dimension: Triton kernels, forward and backward, rows up to 256k wide.

Math, per row ``x`` of ``N`` elements, fp32 arithmetic, one rounding of the output:

    m  = max(x),   s = sum(exp(x - m)),   y = exp(x - m) / s
    backward:  dx = y * (dy - sum(y * dy))

Two paths:

* **single block** (``N`` up to :data:`MAX_SINGLE_BLOCK_COLS`): the whole row (``BLOCK_M`` rows for
  narrow ones) sits in registers; one read, one write;
* **looped** (wider rows): pass 1 streams the row in chunks keeping an online max (a scalar, one
  block reduction per chunk) and per-lane sums rescaled by it (``s <- s * exp(m_old - m_new) +
  exp(x - m_new)``, one exp per element); pass 2 walks the chunks in *reverse* order and writes
  ``exp(x - m) / s``. Both passes load the next chunk before working on the current one.
  Reversing makes the chunks read last in pass 1 the first re-read in pass 2, so the re-read mostly
  hits L2 and the DRAM traffic stays near one read. Backward does the same with ``sum(y * dy)``.

Bytes per call (the minimum the benchmark scores against), ``M x N`` of ``e`` bytes:

    fwd: read M*N*e            write M*N*e
    bwd: read 2*M*N*e (y, dy)  write M*N*e
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels._utils import check_rows, row_config, warps_for

#: Widest row kept whole in registers; wider rows take the looped path.
MAX_SINGLE_BLOCK_COLS = 16384
#: Chunk widths (elements) of the looped path, forward and backward (H200 sweep, bf16, 128256-wide rows:
#: one 32-warp program per SM keeps the rows in flight few enough for the reverse pass to hit L2).
LOOP_BLOCK = 16384
LOOP_BLOCK_BWD = 32768


@triton.jit
def _softmax_fwd_kernel(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows64[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # Padding columns get -inf (probability 0); rows past the end stay 0 so they never compute inf - inf.
    x = tl.where((cols < n_cols)[None, :], x, -float("inf"))
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + rows64[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_kernel(
    dy_ptr, y_ptr, dx_ptr, n_rows, n_cols, dy_stride, y_stride, dx_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    y = tl.load(y_ptr + rows64[:, None] * y_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows64[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
    tl.store(dx_ptr + rows64[:, None] * dx_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_fwd_looped_kernel(
    x_ptr, y_ptr, n_cols, x_stride, y_stride, PREFETCH: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    cols = tl.arange(0, BLOCK_N)
    neg_inf = -float("inf")
    # Pass 1: running max (a scalar, one block reduction per chunk) and per-lane sums rescaled by it.
    m_run = tl.max(tl.full([BLOCK_N], neg_inf, tl.float32), axis=0)
    s_vec = tl.zeros([BLOCK_N], tl.float32)
    # PREFETCH: the next chunk's load is issued before this chunk's reduction (register double buffer).
    x_next = tl.load(x_row + cols, mask=cols < n_cols, other=neg_inf, eviction_policy="evict_last")
    for start in range(0, n_cols, BLOCK_N):
        if PREFETCH:
            x = x_next.to(tl.float32)
            nxt = start + BLOCK_N + cols
            x_next = tl.load(x_row + nxt, mask=nxt < n_cols, other=neg_inf, eviction_policy="evict_last")
        else:
            x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=neg_inf, eviction_policy="evict_last")
            x = x.to(tl.float32)
        m_new = tl.maximum(m_run, tl.max(x, axis=0))
        m_safe = tl.where(m_new == neg_inf, 0.0, m_new)  # an all -inf prefix must not make NaN
        s_vec = s_vec * tl.exp(m_run - m_safe) + tl.exp(x - m_safe)
        m_run = m_new
    inv_s = 1.0 / tl.sum(s_vec, axis=0)
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
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        y = tl.load(y_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        acc += y * dy
    dot = tl.sum(acc, axis=0)
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


def softmax_forward(
    x: torch.Tensor,
    *,
    max_single_block: int = MAX_SINGLE_BLOCK_COLS,
    loop_block: int = LOOP_BLOCK,
    block_m: int | None = None,
    num_warps: int | None = None,
    maxnreg: int | None = None,
    prefetch: bool = True,
) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any leading shape)."""
    x2 = check_rows(x, "softmax input", max_cols=None)
    n_rows, n_cols = x2.shape
    y2 = torch.empty_like(x2)
    looped, bm, bn, nw = _plan(n_cols, x2.element_size(), max_single_block, loop_block, block_m, num_warps)
    if looped:
        _softmax_fwd_looped_kernel[(n_rows,)](
            x2, y2, n_cols, x2.stride(0), y2.stride(0), PREFETCH=prefetch, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg
        )
    else:
        _softmax_fwd_kernel[(triton.cdiv(n_rows, bm),)](
            x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), BLOCK_M=bm, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg
        )
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
) -> torch.Tensor:
    """Gradient of softmax: ``dx = y * (dy - sum(y * dy))`` over the last dimension."""
    y2 = check_rows(y, "softmax saved output", max_cols=None)
    dy2 = check_rows(dy, "softmax grad_output", max_cols=None)
    n_rows, n_cols = y2.shape
    dx2 = torch.empty_like(y2)
    looped, bm, bn, nw = _plan(n_cols, y2.element_size(), max_single_block, loop_block, block_m, num_warps)
    if looped:
        _softmax_bwd_looped_kernel[(n_rows,)](
            dy2, y2, dx2, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0),
            PREFETCH=prefetch, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg,
        )  # fmt: skip
    else:
        _softmax_bwd_kernel[(triton.cdiv(n_rows, bm),)](
            dy2, y2, dx2, n_rows, n_cols, dy2.stride(0), y2.stride(0), dx2.stride(0),
            BLOCK_M=bm, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg,
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
