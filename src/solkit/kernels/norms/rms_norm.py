"""RMSNorm and fused residual-add + RMSNorm: Triton kernels, forward and backward.

Math, per row ``x`` of ``N`` elements (all arithmetic in fp32; ``w' = w + offset``, offset 0 for
Llama, 1 for Gemma's ``(1 + w)``):

    rstd  = 1 / sqrt(mean(x^2) + eps)
    xhat  = x * rstd
    y     = w' * cast(xhat)          casting="llama": xhat is rounded to the input dtype first (HF Llama)
    y     = w' * xhat                casting="gemma": fp32 throughout, one rounding at the end (HF Gemma)

    backward (g = dy * w', the cast treated as identity for dx):
    dx    = rstd * (g - xhat * mean(g * xhat))
    dw    = sum_rows(dy * cast(xhat))

Fused add: ``s = x + residual`` (rounded to the input dtype, as the eager ``residual + hidden`` is),
then ``y = rmsnorm(s)``; both ``s`` and ``y`` are returned. Backward: ``dx = dresidual =
rmsnorm_dx(dy) + ds``.

dW is reduced in two stages: each backward program walks a strided set of row blocks and keeps an
fp32 partial sum in registers, writes it to a ``[programs, N]`` fp32 buffer, and one small kernel
sums the buffer (no atomics).

Bytes per call, ``M x N`` activations of ``e`` bytes, weight of ``e_w`` bytes, rstd fp32 saved only
when a backward will follow (the minimum the benchmark scores against; the ``programs x N x 4``
partial buffer is extra and not counted):

    rmsnorm      fwd: read  M*N*e + N*e_w                 write M*N*e (+ 4*M rstd)
                 bwd: read  2*M*N*e + N*e_w + 4*M         write M*N*e + N*e_w
    add+rmsnorm  fwd: read  2*M*N*e + N*e_w               write 2*M*N*e (+ 4*M rstd)
                 bwd: read  3*M*N*e + N*e_w + 4*M (2*M*N*e when ds is absent)   write M*N*e + N*e_w
"""

from __future__ import annotations

from typing import Literal

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import allowed, device_caps
from solkit.kernels.common.rows import (
    backward_programs,
    check_rows,
    check_weight,
    load_tile,
    load_tile_fp32,
    register_cap,
    row_config,
    sum_partials,
    warps_for,
)
from solkit.kernels.common.tuned import for_width as config_for_width
from solkit.kernels.norms.backward import (
    MAX_SPINS,
    backward_plan,
    launch_rmsnorm_bwd_tma,
    reduce_tile,
    rmsnorm_bwd_kernel,
    sync_counter,
)
from solkit.kernels.norms.paths import PATHS

Casting = Literal["llama", "gemma"]
CASTINGS = ("llama", "gemma")
#: Launch defaults (norms/configs.yaml ``rmsnorm``; docs/kernels/norms.md): forward rows per program (so a
#: program holds at least ``min_tile`` elements) and warps (each thread holds ``bytes_per_thread`` of
#: each streamed tile), backward warps, programs per SM and row blocks prefetched, and the dW
#: partial-sum reduction's tile.
RMSNORM_CONFIG = tuned.load("norms", "rmsnorm")


@triton.jit
def _rmsnorm_fwd_rows(
    x, res, w_raw, rows, cols, y_ptr, s_ptr, rstd_ptr, n_rows, n_cols, y_stride, s_stride, eps, offset,
    HAS_RESIDUAL: tl.constexpr, STORE_RSTD: tl.constexpr, GEMMA: tl.constexpr,
):  # fmt: skip
    """Normalise one loaded ``[BLOCK_M, BLOCK_N]`` tile (fp32 ``x``, ``res``) and store ``y`` (``s``, rstd)."""
    rows64 = rows.to(tl.int64)  # row * stride overflows int32 beyond 2^31 elements
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    if HAS_RESIDUAL:
        s = (x + res).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + rows64[:, None] * s_stride + cols[None, :], s, mask=mask)
        x = s.to(tl.float32)  # normalise the rounded sum, exactly what the next layer sees
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    if STORE_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=rows < n_rows)
    xhat = x * rstd[:, None]
    if not GEMMA:
        xhat = xhat.to(y_ptr.dtype.element_ty).to(tl.float32)
    y = (xhat * (w_raw.to(tl.float32) + offset)[None, :]).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + rows64[:, None] * y_stride + cols[None, :], y, mask=mask)


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr, res_ptr, w_ptr, y_ptr, s_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, res_stride, y_stride, s_stride, eps, offset,
    HAS_RESIDUAL: tl.constexpr, STORE_RSTD: tl.constexpr, GEMMA: tl.constexpr, PERSISTENT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    # The weight is loaded first so its (L2) latency overlaps the row's, not the reduction's tail.
    w_raw = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    if PERSISTENT:
        # A few programs per SM walk row blocks pid, pid + P, ...; the next block's loads are issued
        # before this one is reduced (register double buffer), and no program launches per row.
        step = tl.num_programs(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        x_next = load_tile(x_ptr, rows, x_stride, cols, n_rows, n_cols)
        r_next = x_next
        if HAS_RESIDUAL:
            r_next = load_tile(res_ptr, rows, res_stride, cols, n_rows, n_cols)
        for block in range(pid, tl.cdiv(n_rows, BLOCK_M), step):
            rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
            x, res = x_next.to(tl.float32), r_next.to(tl.float32)
            x_next = load_tile(x_ptr, rows + step * BLOCK_M, x_stride, cols, n_rows, n_cols)
            if HAS_RESIDUAL:
                r_next = load_tile(res_ptr, rows + step * BLOCK_M, res_stride, cols, n_rows, n_cols)
            _rmsnorm_fwd_rows(
                x, res, w_raw, rows, cols, y_ptr, s_ptr, rstd_ptr, n_rows, n_cols, y_stride, s_stride, eps, offset,
                HAS_RESIDUAL, STORE_RSTD, GEMMA,
            )  # fmt: skip
    else:
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        x = load_tile_fp32(x_ptr, rows, x_stride, cols, n_rows, n_cols)
        res = x
        if HAS_RESIDUAL:
            res = load_tile_fp32(res_ptr, rows, res_stride, cols, n_rows, n_cols)
        _rmsnorm_fwd_rows(
            x, res, w_raw, rows, cols, y_ptr, s_ptr, rstd_ptr, n_rows, n_cols, y_stride, s_stride, eps, offset,
            HAS_RESIDUAL, STORE_RSTD, GEMMA,
        )  # fmt: skip


@triton.jit
def _sum_input(x, r, s_ptrs, mask, HAS_RESIDUAL: tl.constexpr, KEEP: tl.constexpr):
    """A loaded piece of the row as fp32; with the residual, the rounded sum ``s = x + r`` (as eager rounds
    it), stored for pass 2 to re-read."""
    if HAS_RESIDUAL:
        x = (x.to(tl.float32) + r.to(tl.float32)).to(s_ptrs.dtype.element_ty)
        tl.store(s_ptrs, x, mask=mask, eviction_policy=KEEP)
    return x.to(tl.float32)


@triton.jit
def _normalize_store(v, w_ptrs, y_ptrs, mask, rstd, offset, GEMMA: tl.constexpr, HAS_OFFSET: tl.constexpr,
                     W_POLICY: tl.constexpr, OUT_POLICY: tl.constexpr):  # fmt: skip
    """``y = w' * cast(v * rstd)`` (Gemma: no intermediate rounding) for one re-read piece of the row. Without
    an offset, Llama's ``w * cast(xhat)`` in bf16 becomes one packed ``mul.bf16x2`` per two elements (the
    same correctly rounded product; an added offset kept it in fp32: 48 more instructions a thread at 8192
    columns x 16 warps)."""
    xhat = v.to(tl.float32) * rstd
    if not GEMMA:
        xhat = xhat.to(y_ptrs.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptrs, mask=mask, other=0.0, eviction_policy=W_POLICY).to(tl.float32)
    if HAS_OFFSET:
        w += offset
    tl.store(y_ptrs, (xhat * w).to(y_ptrs.dtype.element_ty), mask=mask, eviction_policy=OUT_POLICY)


@triton.jit
def _rmsnorm_fwd_looped_kernel(
    x_ptr, res_ptr, w_ptr, y_ptr, s_ptr, rstd_ptr, n_cols, x_stride, res_stride, y_stride, s_stride, eps, offset,
    HAS_RESIDUAL: tl.constexpr, STORE_RSTD: tl.constexpr, GEMMA: tl.constexpr, CHUNK: tl.constexpr,
    ONE_CHUNK: tl.constexpr, PREFETCH: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
    OUT_POLICY: tl.constexpr, HAS_OFFSET: tl.constexpr,
):  # fmt: skip
    """One row per program in ``CHUNK``-column pieces, two passes: the sum of squares (with the residual:
    ``s = x + residual`` stored on the way), then the output from a second read of the row, which the
    L1 or L2 serves (the rows in flight are a few MB). Few registers per thread (pass 1 keeps only the
    fp32 accumulator), so many programs share an SM and their loads, reductions and stores interleave.
    ``ONE_CHUNK`` (``CHUNK`` covers the row): straight-line code, the whole row's loads issued at once,
    then re-read from L1 (torch.compile's launch shape at 8192 wide: 16 warps, 32 registers, four programs
    an SM). ``PREFETCH``: each pass loads its next chunk before working on the current one (two chunks
    in flight per program). Cache hints (eviction policies, "" for none): ``KEEP`` for pass 1's loads (re-read
    in pass 2; the one-chunk path's weight too), ``DROP`` for pass 2's, ``OUT_POLICY`` for ``y``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x_row = x_ptr + row * x_stride
    r_row = res_ptr + row * res_stride
    y_row = y_ptr + row * y_stride
    src_ptr = s_ptr + row * s_stride if HAS_RESIDUAL else x_row  # what pass 2 re-reads
    if ONE_CHUNK:
        # No loop: inside one (even of one trip), ptxas (sm_90a) issued a thread's two masked 16-byte loads
        # one after the other, a DRAM round trip each (docs/kernels/norms.md).
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy=KEEP)
        r = x
        if HAS_RESIDUAL:
            r = tl.load(r_row + cols, mask=mask, other=0.0)
        x = _sum_input(x, r, src_ptr + cols, mask, HAS_RESIDUAL, KEEP)
        acc = x * x
    else:
        acc = tl.zeros([CHUNK], tl.float32)
        if PREFETCH:
            x_nxt = tl.load(x_row + cols, mask=cols < n_cols, other=0.0, eviction_policy=KEEP)
            r_nxt = x_nxt
            if HAS_RESIDUAL:
                r_nxt = tl.load(r_row + cols, mask=cols < n_cols, other=0.0)
        for start in range(0, n_cols, CHUNK):
            mask = start + cols < n_cols
            if PREFETCH:
                x = x_nxt
                r = r_nxt
                nxt = start + CHUNK + cols
                x_nxt = tl.load(x_row + nxt, mask=nxt < n_cols, other=0.0, eviction_policy=KEEP)
                r_nxt = x_nxt
                if HAS_RESIDUAL:
                    r_nxt = tl.load(r_row + nxt, mask=nxt < n_cols, other=0.0)
            else:
                x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy=KEEP)
                r = x
                if HAS_RESIDUAL:
                    r = tl.load(r_row + start + cols, mask=mask, other=0.0)
            x = _sum_input(x, r, src_ptr + start + cols, mask, HAS_RESIDUAL, KEEP)
            acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # the stored sum is visible to every thread of the program before pass 2 reads it
    if STORE_RSTD:
        tl.store(rstd_ptr + row, rstd)
    if ONE_CHUNK:
        mask = cols < n_cols
        v = tl.load(src_ptr + cols, mask=mask, other=0.0, eviction_policy=DROP)
        _normalize_store(v, w_ptr + cols, y_row + cols, mask, rstd, offset, GEMMA, HAS_OFFSET, KEEP, OUT_POLICY)
    else:
        if PREFETCH:
            v_nxt = tl.load(src_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy=DROP)
        for start in range(0, n_cols, CHUNK):
            mask = start + cols < n_cols
            if PREFETCH:
                v = v_nxt
                nxt = start + CHUNK + cols
                v_nxt = tl.load(src_ptr + nxt, mask=nxt < n_cols, other=0.0, eviction_policy=DROP)
            else:
                v = tl.load(src_ptr + start + cols, mask=mask, other=0.0, eviction_policy=DROP)
            _normalize_store(v, w_ptr + start + cols, y_row + start + cols, mask, rstd, offset, GEMMA, HAS_OFFSET,
                             "", OUT_POLICY)  # fmt: skip


#: Cache hints of the looped forward (eviction policies of pass 1's loads, pass 2's loads, the output).
LOOPED_HINTS = {0: ("", "", ""), 1: ("evict_last", "evict_first", ""), 2: ("evict_last", "evict_first", "evict_first")}


def _hint_args(hints: int) -> dict:
    if hints not in LOOPED_HINTS:
        raise SolkitError(f"rmsnorm hints: {hints!r} not supported; allowed: {', '.join(map(str, LOOPED_HINTS))}")
    return dict(zip(("KEEP", "DROP", "OUT_POLICY"), LOOPED_HINTS[hints]))


def _stages(num_stages: int | None) -> dict:
    """Launch option ``num_stages`` only when set (Triton's default otherwise)."""
    return {"num_stages": int(num_stages)} if num_stages else {}


def check_casting(casting: str) -> None:
    if casting not in CASTINGS:
        raise SolkitError(f"rmsnorm casting: {casting!r} not supported; allowed: {', '.join(CASTINGS)}")


def rmsnorm_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    residual: torch.Tensor | None = None,
    offset: float = 0.0,
    casting: Casting = "llama",
    save_rstd: bool = True,
    block_m: int | None = None,
    num_warps: int | None = None,
    maxnreg: int | None = None,
    programs_per_sm: int | None = None,
    chunk: int | None = None,
    looped_prefetch: bool | None = None,
    num_stages: int | None = None,
    hints: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the forward. Returns ``(y, s, rstd)``: ``s`` only with a residual, ``rstd`` only if saved.

    ``programs_per_sm`` switches to a persistent grid of that many programs per SM (default: one
    program per row block); ``chunk`` (columns, a power of two; 0 = off) to the two-pass looped kernel,
    one row per program (the config's ``chunk`` when None), with ``looped_prefetch`` (two chunks in
    flight per program; the config's ``looped_prefetch`` when None), ``num_stages`` (Triton's software
    pipelining of the chunk loops; ``looped_num_stages``) and ``hints`` (cache hints, :data:`LOOPED_HINTS`;
    ``looped_hints``, default 1)."""
    check_casting(casting)
    x2 = check_rows(x, "rmsnorm input")
    kernel = "add_rmsnorm_fwd" if residual is not None else "rmsnorm_fwd"
    allowed(PATHS[kernel], device_caps(x2), kernel)  # one portable path: raises only where nothing runs
    n_rows, n_cols = x2.shape
    check_weight(weight, n_cols, "rmsnorm weight", x.device)
    res2 = s2 = None
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise SolkitError(f"rmsnorm residual: expected shape {tuple(x.shape)} and dtype {x.dtype}")
        res2 = check_rows(residual, "rmsnorm residual")
        s2 = torch.empty_like(x2)
    y2 = torch.empty_like(x2)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device) if save_rstd else None
    fcfg = config_for_width(RMSNORM_CONFIG, n_cols)["fwd_residual" if residual is not None else "fwd"]
    bm, bn, _ = row_config(n_cols, x2.element_size(), min_tile=fcfg["min_tile"])
    bm = block_m or bm
    bpt = fcfg["bytes_per_thread"]
    nw = (
        num_warps
        or fcfg.get("num_warps")
        or min(max(warps_for(bm * bn, x2.element_size(), bytes_per_thread=bpt), 4), 32)
    )
    chunk = fcfg.get("chunk", 0) if chunk is None else chunk
    if chunk and not programs_per_sm:
        _rmsnorm_fwd_looped_kernel[(n_rows,)](
            x2, res2 if res2 is not None else x2, weight, y2, s2 if s2 is not None else y2, rstd if save_rstd else x2,
            n_cols, x2.stride(0), res2.stride(0) if res2 is not None else 0, y2.stride(0),
            s2.stride(0) if s2 is not None else 0, eps, offset,
            HAS_RESIDUAL=res2 is not None, STORE_RSTD=save_rstd, GEMMA=casting == "gemma", HAS_OFFSET=offset != 0.0,
            CHUNK=min(triton.next_power_of_2(chunk), bn), ONE_CHUNK=triton.next_power_of_2(chunk) >= bn,
            num_warps=num_warps or fcfg.get("looped_num_warps", 4),
            PREFETCH=bool(fcfg.get("looped_prefetch", False) if looped_prefetch is None else looped_prefetch),
            **_hint_args(fcfg.get("looped_hints", 1) if hints is None else hints),
            maxnreg=maxnreg, **_stages(num_stages or fcfg.get("looped_num_stages")),
        )  # fmt: skip
        return y2.view(x.shape), s2.view(x.shape) if s2 is not None else None, rstd
    n_blocks = triton.cdiv(n_rows, bm)
    grid = n_blocks
    if programs_per_sm:  # persistent: every program must be resident at once (see register_cap)
        grid = backward_programs(n_blocks, x2, programs_per_sm)
        maxnreg = maxnreg or register_cap(programs_per_sm, nw)
    _rmsnorm_fwd_kernel[(grid,)](
        x2, res2 if res2 is not None else x2, weight, y2, s2 if s2 is not None else y2, rstd if save_rstd else x2,
        n_rows, n_cols, x2.stride(0), res2.stride(0) if res2 is not None else 0, y2.stride(0),
        s2.stride(0) if s2 is not None else 0, eps, offset,
        HAS_RESIDUAL=res2 is not None, STORE_RSTD=save_rstd, GEMMA=casting == "gemma",
        PERSISTENT=bool(programs_per_sm), BLOCK_M=bm, BLOCK_N=bn, num_warps=nw, maxnreg=maxnreg,
    )  # fmt: skip
    s = s2.view(x.shape) if s2 is not None else None
    return y2.view(x.shape), s, rstd


def rmsnorm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    *,
    ds: torch.Tensor | None = None,
    offset: float = 0.0,
    casting: Casting = "llama",
    block_m: int | None = None,
    num_warps: int | None = None,
    programs_per_sm: int | None = None,
    prefetch: int | None = None,
    partial_sum: dict | None = None,
    fused_reduce: bool | None = None,
    balanced: bool | None = None,
    w_reload: bool | None = None,
    two_pass: bool | None = None,
    tma_stages: int | None = None,
    maxnreg: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the backward. ``x`` is the normalised input (the sum ``s`` for add+RMSNorm); ``ds`` is the
    gradient reaching the sum output, added to dx. Returns ``(dx, dweight)``. ``prefetch``: row blocks
    loaded ahead (0, 1, 2; True means 1); ``fused_reduce``: dW summed inside the kernel after a grid barrier
    (GPU only) instead of by :func:`sum_partials`; ``balanced``: as few programs as give every program the
    same number of row blocks; ``w_reload``: the weight re-read per row block (registers for the ring);
    ``two_pass``: no ring, each row block read twice (the second time from L1), for more programs an SM;
    ``tma_stages`` (> 1): the TMA kernel, rows of x and dy pipelined through shared memory (power-of-two
    widths of 256-16384 with contiguous rows; the pointer kernel otherwise).
    Launch parameters left None come from :data:`RMSNORM_CONFIG`; ``partial_sum`` holds :func:`sum_partials`
    tile options (``solkit.kernels.norms.backward`` has the kernel)."""
    x2 = check_rows(x, "rmsnorm saved input")
    dy2 = check_rows(dy, "rmsnorm grad_output")
    ds2 = check_rows(ds, "rmsnorm grad of sum") if ds is not None else None
    n_rows, n_cols = x2.shape
    dx2 = torch.empty_like(x2)
    cfg = config_for_width(RMSNORM_CONFIG, n_cols)
    plan = backward_plan(x2, cfg, [x2, dy2, ds2, dx2], block_m=block_m, num_warps=num_warps,
                         programs_per_sm=programs_per_sm, tma_stages=tma_stages, balanced=balanced,
                         fused_reduce=fused_reduce, maxnreg=maxnreg, ds=ds is not None)  # fmt: skip
    programs, fused = plan.programs, plan.fused
    partial = torch.empty(programs, n_cols, dtype=torch.float32, device=x.device)
    dw = torch.empty(n_cols, dtype=weight.dtype, device=x.device) if fused else partial
    if plan.boxes is not None:
        launch_rmsnorm_bwd_tma(dy2, ds2, x2, weight, rstd, dx2, partial, dw, fused, programs, offset,
                               casting == "gemma", plan.tma_stages, plan.num_warps, plan.maxnreg,
                               plan.boxes)  # fmt: skip
    else:
        red_p, red_c = reduce_tile(n_cols, programs)
        rmsnorm_bwd_kernel[(programs,)](
            dy2, ds2 if ds2 is not None else dy2, x2, weight, rstd, dx2, partial, dw,
            sync_counter(x.device, programs) if fused else partial,
            n_rows, n_cols, dy2.stride(0), ds2.stride(0) if ds2 is not None else 0, x2.stride(0), dx2.stride(0), offset,
            MAX_SPINS, HAS_DS=ds2 is not None, GEMMA=casting == "gemma",
            PREFETCH=int(cfg["bwd_prefetch"] if prefetch is None else prefetch),
            BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, FUSED=fused, RED_P=red_p, RED_C=red_c,
            W_RELOAD=bool(cfg.get("bwd_w_reload", False) if w_reload is None else w_reload),
            TWO_PASS=bool(cfg.get("bwd_two_pass", False) if two_pass is None else two_pass),
            num_warps=plan.num_warps, maxnreg=plan.maxnreg,
        )  # fmt: skip
    if fused:
        return dx2.view(x.shape), dw
    return dx2.view(x.shape), sum_partials(partial, weight.dtype, **(partial_sum or cfg["partial_sum"]))
