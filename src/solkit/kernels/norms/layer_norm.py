"""LayerNorm over the last dimension: Triton kernels, forward and backward.

Math, per row ``x`` of ``N`` elements, fp32 arithmetic, one rounding of the output:

    mean = sum(x) / N
    rstd = 1 / sqrt(sum((x - mean)^2) / N + eps)
    xhat = (x - mean) * rstd
    y    = xhat * w + b

    backward (g = dy * w):
    dx   = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dw   = sum_rows(dy * xhat)
    db   = sum_rows(dy)

dW and dB are reduced in two stages: each persistent backward program accumulates fp32 partial sums
over a strided set of row blocks and writes them to a ``[programs, 2, N]`` fp32 buffer, summed once
by a small kernel (no atomics).

Bytes per call, ``M x N`` activations of ``e`` bytes, weight and bias of ``e_w`` bytes, mean and
rstd (fp32) saved only when a backward will follow (the partial buffer is extra, not counted):

    fwd: read M*N*e + 2*N*e_w                  write M*N*e (+ 8*M mean, rstd)
    bwd: read 2*M*N*e + N*e_w + 8*M            write M*N*e + 2*N*e_w
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import allowed, device_caps
from solkit.kernels.common.rows import check_rows, check_weight, load_tile, row_config, sum_partials, warps_for
from solkit.kernels.common.tuned import for_width as config_for_width
from solkit.kernels.norms.backward import (
    MAX_SPINS,
    add_pairs,
    backward_plan,
    grid_sum_partials,
    launch_layernorm_bwd_tma,
    reduce_tile,
    sync_counter,
)
from solkit.kernels.norms.paths import PATHS

#: Launch defaults (norms/configs.yaml ``layernorm``; docs/kernels/norms.md).
#: ``one_pass``: mean and variance from one reduction; warps so each thread holds ``*_bytes_per_thread``
#: of each streamed row tile (4 forward, 8 backward warps at 4096-wide bf16); backward programs per SM;
#: the dW/dB partial-sum reduction's tile.
LAYERNORM_CONFIG = tuned.load("norms", "layernorm")


@triton.jit
def _layernorm_fwd_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, x_stride, y_stride, eps,
    HAS_BIAS: tl.constexpr, STORE_STATS: tl.constexpr, ONE_PASS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    # Weight and bias first, so their (L2) latency overlaps the row's rather than following the reductions.
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)  # converted at use: fewer live registers
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=col_mask, other=0.0)
    x = tl.load(x_ptr + rows64[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if ONE_PASS:
        # sum and sum of squares in one block reduction (one round of shuffles and barriers instead of
        # two dependent ones), on data shifted by the row's first element so that E[d^2] - E[d]^2 does
        # not cancel when |mean| >> std (the shifted-data variance; exact in real arithmetic).
        shift = tl.load(x_ptr + rows64 * x_stride, mask=rows < n_rows, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[:, None], 0.0)
        sum_d, sum_d2 = tl.reduce((d, d * d), 1, add_pairs)
        mean_d = sum_d / n_cols
        mean = shift + mean_d
        rstd = tl.rsqrt(tl.maximum(sum_d2 / n_cols - mean_d * mean_d, 0.0) + eps)
        xc = x - mean[:, None]
    else:
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
    if STORE_STATS:
        tl.store(mean_ptr + rows, mean, mask=rows < n_rows)
        tl.store(rstd_ptr + rows, rstd, mask=rows < n_rows)
    y = xc * rstd[:, None] * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        y += b.to(tl.float32)[None, :]
    tl.store(y_ptr + rows64[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_store(x_ptrs, w_ptrs, b_ptrs, y_ptrs, mask, mean, rstd, HAS_BIAS: tl.constexpr, W_POLICY: tl.constexpr):
    """Re-read one piece of the row (dropped from the caches after) and store ``(x - mean) * rstd * w + b``."""
    x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    y = (x - mean) * rstd * tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy=W_POLICY).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(b_ptrs, mask=mask, other=0.0, eviction_policy=W_POLICY).to(tl.float32)
    tl.store(y_ptrs, y.to(y_ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_fwd_looped_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, x_stride, y_stride, eps,
    HAS_BIAS: tl.constexpr, STORE_STATS: tl.constexpr, CHUNK: tl.constexpr, ONE_CHUNK: tl.constexpr,
):  # fmt: skip
    """One row per program in ``CHUNK``-column pieces, two passes: pass 1 sums ``d = x - x[0]`` and ``d^2``
    (the shifted one-pass statistics of the one-block kernel, per-lane fp32 accumulators), pass 2 re-reads
    the row (from L1/L2: pass 1 keeps its lines, pass 2 drops them) and writes ``y``. Pass 1 holds no
    copy of the row past the reduction, so more programs share an SM than with the row kept in registers.
    ``ONE_CHUNK`` (``CHUNK`` covers the row): straight-line code, every load of the row issued at once (in
    a loop ptxas issued a thread's masked 16-byte loads one after the other)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    shift = tl.load(x_row).to(tl.float32)
    if ONE_CHUNK:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        acc_d = tl.where(mask, x - shift, 0.0)
        acc_d2 = acc_d * acc_d
    else:
        acc_d = tl.zeros([CHUNK], tl.float32)
        acc_d2 = tl.zeros([CHUNK], tl.float32)
        for start in range(0, n_cols, CHUNK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
            d = tl.where(mask, x - shift, 0.0)
            acc_d += d
            acc_d2 += d * d
    sum_d, sum_d2 = tl.reduce((acc_d, acc_d2), 0, add_pairs)
    mean_d = sum_d / n_cols
    mean = shift + mean_d
    rstd = tl.rsqrt(tl.maximum(sum_d2 / n_cols - mean_d * mean_d, 0.0) + eps)
    if STORE_STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
    if ONE_CHUNK:
        mask = cols < n_cols
        _ln_store(x_row + cols, w_ptr + cols, b_ptr + cols, y_row + cols, mask, mean, rstd, HAS_BIAS, "evict_last")
    else:
        for start in range(0, n_cols, CHUNK):
            offs = start + cols
            _ln_store(x_row + offs, w_ptr + offs, b_ptr + offs, y_row + offs, offs < n_cols, mean, rstd, HAS_BIAS, "")


@triton.jit
def _bwd_tiles(x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows, cols, n_rows, n_cols, x_stride, dy_stride):
    """One row block's backward inputs, x and dy unconverted: ``(x, dy, mean, rstd)``."""
    x = load_tile(x_ptr, rows, x_stride, cols, n_rows, n_cols)
    dy = load_tile(dy_ptr, rows, dy_stride, cols, n_rows, n_cols)
    mean = tl.load(mean_ptr + rows, mask=rows < n_rows, other=0.0)
    rstd = tl.load(rstd_ptr + rows, mask=rows < n_rows, other=0.0)
    return x, dy, mean, rstd


@triton.jit
def _layernorm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr, sums_ptr, sync_ptr,
    n_rows, n_cols, dy_stride, x_stride, dx_stride, max_spins,
    HAS_BIAS: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    FUSED: tl.constexpr = False, W_RELOAD: tl.constexpr = False, RED_P: tl.constexpr = 1, RED_C: tl.constexpr = 1,
):  # fmt: skip
    """Persistent LayerNorm backward (as RMSNorm's in ``solkit.kernels.norms.backward``: a register ring of
    ``PREFETCH`` row blocks, ``W_RELOAD``, ``FUSED`` dW/dB reduction into ``sums`` = ``[dw | db]``)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if not W_RELOAD:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # PREFETCH (1 or 2): load the next one or two row blocks (x, dy and their mean and rstd) while this
    # one is computed (a register ring); without it the per-row statistics' latency is exposed every row.
    rows1 = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    x1, dy1, m1, r1 = _bwd_tiles(x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows1, cols, n_rows, n_cols, x_stride, dy_stride)
    if PREFETCH == 2:
        rows2 = rows1 + step * BLOCK_M
        x2, dy2, m2, r2 = _bwd_tiles(
            x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows2, cols, n_rows, n_cols, x_stride, dy_stride
        )
    for block in range(pid, tl.cdiv(n_rows, BLOCK_M), step):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        if PREFETCH == 0:
            x, dy, mean, rstd = _bwd_tiles(x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows, cols, n_rows, n_cols,
                                           x_stride, dy_stride)  # fmt: skip
        else:
            x, dy, mean, rstd = x1, dy1, m1, r1
            if PREFETCH == 2:
                x1, dy1, m1, r1 = x2, dy2, m2, r2
                x2, dy2, m2, r2 = _bwd_tiles(x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows + 2 * step * BLOCK_M, cols,
                                             n_rows, n_cols, x_stride, dy_stride)  # fmt: skip
            else:
                x1, dy1, m1, r1 = _bwd_tiles(x_ptr, dy_ptr, mean_ptr, rstd_ptr, rows + step * BLOCK_M, cols,
                                             n_rows, n_cols, x_stride, dy_stride)  # fmt: skip
        if W_RELOAD:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        x, dy = x.to(tl.float32), dy.to(tl.float32)
        mask = row_mask[:, None] & col_mask[None, :]
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        dw_acc += dy * xhat
        if HAS_BIAS:
            db_acc += dy
        g = dy * w[None, :]
        # Both row sums in one block reduction (one round of shuffles and barriers).
        sum_gx, sum_g = tl.reduce((g * xhat, g), 1, add_pairs)
        dx = (g - (sum_g / n_cols)[:, None] - xhat * (sum_gx / n_cols)[:, None]) * rstd[:, None]
        dx_ptrs = dx_ptr + rows.to(tl.int64)[:, None] * dx_stride + cols[None, :]
        tl.store(dx_ptrs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(partial_ptr + pid * 2 * n_cols + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    if HAS_BIAS:
        tl.store(partial_ptr + pid * 2 * n_cols + n_cols + cols, tl.sum(db_acc, axis=0), mask=col_mask)
    if FUSED:
        grid_sum_partials(partial_ptr, sums_ptr, sync_ptr, 2 * n_cols if HAS_BIAS else n_cols, 2 * n_cols,
                          max_spins, RED_P, RED_C)  # fmt: skip


def layernorm_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    save_stats: bool = True,
    **launch,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the forward. Returns ``(y, mean, rstd)``; the statistics only when ``save_stats``. ``launch``:
    the launch options of :func:`layernorm_forward_stats`."""
    y, stats = layernorm_forward_stats(x, weight, bias, eps, save_stats=save_stats, **launch)
    return (y, None, None) if stats is None else (y, stats[0], stats[1])


def layernorm_forward_stats(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    save_stats: bool = True,
    block_m: int | None = None,
    num_warps: int | None = None,
    maxnreg: int | None = None,
    one_pass: bool | None = None,
    chunk: int | None = None,
    num_stages: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the forward. Returns ``(y, stats)``: ``stats`` is ``[2, rows]`` fp32 (mean, rstd), only when
    ``save_stats`` (one buffer: a custom op's outputs never share storage).

    ``one_pass`` computes mean and variance in one reduction (shifted sums; default
    :data:`LAYERNORM_CONFIG`) instead of mean first, then the centred sum of squares. ``chunk`` (columns,
    a power of two; 0 = off; the config's ``fwd_chunk`` when None) switches to the two-pass looped kernel
    (one row per program, shifted one-pass statistics, ``num_warps`` or the config's ``fwd_looped_num_warps``;
    ``num_stages``: Triton's pipelining of the chunk loops, the config's ``fwd_looped_num_stages``)."""
    x2 = check_rows(x, "layernorm input")
    allowed(PATHS["layernorm_fwd"], device_caps(x2), "layernorm_fwd")  # one portable path: raises only where none runs
    n_rows, n_cols = x2.shape
    check_weight(weight, n_cols, "layernorm weight", x.device)
    check_weight(bias, n_cols, "layernorm bias", x.device)
    y2 = torch.empty_like(x2)
    stats = torch.empty(2, n_rows, dtype=torch.float32, device=x.device) if save_stats else None
    cfg = config_for_width(LAYERNORM_CONFIG, n_cols)
    bm, bn, _ = row_config(n_cols, x2.element_size(), min_tile=cfg["fwd_min_tile"])
    bm = block_m or bm
    bpt = cfg["fwd_bytes_per_thread"]
    nw = (
        num_warps
        or cfg.get("fwd_num_warps")
        or min(max(warps_for(bm * bn, x2.element_size(), bytes_per_thread=bpt), 4), 32)
    )
    chunk = cfg.get("fwd_chunk", 0) if chunk is None else chunk
    if chunk:
        stages = num_stages or cfg.get("fwd_looped_num_stages")
        _layernorm_fwd_looped_kernel[(n_rows,)](
            x2, weight, bias if bias is not None else weight, y2,
            stats[0] if stats is not None else y2, stats[1] if stats is not None else y2,
            n_cols, x2.stride(0), y2.stride(0), eps,
            HAS_BIAS=bias is not None, STORE_STATS=save_stats, CHUNK=min(triton.next_power_of_2(chunk), bn),
            ONE_CHUNK=triton.next_power_of_2(chunk) >= bn,
            num_warps=num_warps or cfg.get("fwd_looped_num_warps", 8), maxnreg=maxnreg,
            **({"num_stages": int(stages)} if stages else {}),
        )  # fmt: skip
    else:
        _layernorm_fwd_kernel[(triton.cdiv(n_rows, bm),)](
            x2, weight, bias if bias is not None else weight, y2,
            stats[0] if stats is not None else y2, stats[1] if stats is not None else y2,
            n_rows, n_cols, x2.stride(0), y2.stride(0), eps,
            HAS_BIAS=bias is not None, STORE_STATS=save_stats,
            ONE_PASS=cfg["one_pass"] if one_pass is None else one_pass,
            BLOCK_M=bm, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg,
        )  # fmt: skip
    return y2.view(x.shape), stats


def layernorm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    *,
    has_bias: bool = True,
    bias_dtype: torch.dtype | None = None,
    **launch,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Launch the backward. Returns ``(dx, dweight, dbias)`` (``dbias`` None without a bias). ``launch``: the
    launch options of :func:`layernorm_backward_sums`."""
    dx, sums = layernorm_backward_sums(dy, x, weight, mean, rstd, has_bias=has_bias, **launch)
    n_cols = weight.shape[0]
    if not has_bias:
        return dx, sums, None
    db = sums[n_cols:] if (bias_dtype or weight.dtype) == weight.dtype else sums[n_cols:].to(bias_dtype)
    return dx, sums[:n_cols], db


def layernorm_backward_sums(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    *,
    has_bias: bool = True,
    block_m: int | None = None,
    num_warps: int | None = None,
    programs_per_sm: int | None = None,
    prefetch: int | None = None,
    partial_sum: dict | None = None,
    fused_reduce: bool | None = None,
    balanced: bool | None = None,
    w_reload: bool | None = None,
    tma_stages: int | None = None,
    maxnreg: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the backward. Returns ``(dx, sums)``: ``sums`` is ``dweight`` followed by ``dbias`` (with a bias)
    in the weight's dtype, one buffer. ``prefetch``: row blocks loaded ahead (0, 1, 2; True means 1);
    ``fused_reduce``, ``balanced``, ``w_reload``, ``tma_stages``: as :func:`~rms_norm.rmsnorm_backward`. Launch
    parameters left None come from :data:`LAYERNORM_CONFIG`."""
    x2 = check_rows(x, "layernorm saved input")
    dy2 = check_rows(dy, "layernorm grad_output")
    n_rows, n_cols = x2.shape
    dx2 = torch.empty_like(x2)
    cfg = config_for_width(LAYERNORM_CONFIG, n_cols)
    plan = backward_plan(x2, cfg, [x2, dy2, dx2], block_m=block_m, num_warps=num_warps,
                         programs_per_sm=programs_per_sm, tma_stages=tma_stages, balanced=balanced,
                         fused_reduce=fused_reduce, maxnreg=maxnreg, entry="layernorm")  # fmt: skip
    programs, fused = plan.programs, plan.fused
    partial_sum = partial_sum or cfg["partial_sum"]
    partial = torch.empty(programs, 2 * n_cols, dtype=torch.float32, device=x.device)
    n_sums = 2 * n_cols if has_bias else n_cols
    sums = torch.empty(n_sums, dtype=weight.dtype, device=x.device) if fused else partial
    red_p, red_c = reduce_tile(n_sums, programs)
    if plan.boxes is not None:
        launch_layernorm_bwd_tma(dy2, x2, weight, mean, rstd, dx2, partial, sums, fused, programs, has_bias,
                                 plan.tma_stages, plan.num_warps, plan.maxnreg, plan.boxes)  # fmt: skip
    else:
        _layernorm_bwd_kernel[(programs,)](
            dy2, x2, weight, mean, rstd, dx2, partial, sums, sync_counter(x.device, programs) if fused else partial,
            n_rows, n_cols, dy2.stride(0), x2.stride(0), dx2.stride(0), MAX_SPINS,
            HAS_BIAS=has_bias, PREFETCH=int(cfg["bwd_prefetch"] if prefetch is None else prefetch),
            BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, FUSED=fused, RED_P=red_p, RED_C=red_c,
            W_RELOAD=bool(cfg.get("bwd_w_reload", False) if w_reload is None else w_reload),
            num_warps=plan.num_warps, maxnreg=plan.maxnreg,
        )  # fmt: skip
    if not fused:
        sums = sum_partials(partial if has_bias else partial[:, :n_cols], weight.dtype, **partial_sum)
    return dx2.view(x.shape), sums
