"""Norm backward pieces shared by RMSNorm and LayerNorm: the RMSNorm backward kernel, the grid-wide dW
reduction tail, the balanced persistent grid and the barrier counters.

RMSNorm backward, per row (``g = dy * w'``, ``w' = w + offset``; the Llama cast of ``xhat`` treated as
identity for dx)::

    dx = rstd * (g - xhat * mean(g * xhat))      (+ ds, the gradient reaching add+RMSNorm's sum output)
    dw = sum_rows(dy * cast(xhat))

Bytes: read ``2*M*N*e`` (x, dy; ``3*M*N*e`` with ds) ``+ N*e_w + 4*M`` (rstd), write ``M*N*e + N*e_w``.

dW is reduced in two stages: each persistent program keeps fp32 partial sums over its strided row blocks and
writes them as one row of a ``[P, K]`` fp32 buffer; then the ``K`` column sums. Two ways to do the second
stage: a separate small kernel (:func:`solkit.kernels.common.rows.sum_partials`), or — ``FUSED`` — inside the
backward kernel itself: every program arrives at a grid barrier (one 64-bit counter per grid size, only ever
incremented, so it needs no reset between launches), then sums a column slice of all ``P`` partial rows
(from L2) and writes the final ``dw`` in the weight's dtype. That saves the second launch (its start-up,
ramp and the gap between the two kernels). Every program is resident at once (registers capped, as the
persistent grid requires anyway); the wait is bounded, and a barrier that times out writes NaN, never hangs.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, allowed, device_caps, forced_portable
from solkit.kernels.common.device import interpreting, use_descriptor_scratch
from solkit.kernels.common.exchange import per_sm_for
from solkit.kernels.common.rows import backward_programs, load_tile, register_cap, row_config, warps_for
from solkit.kernels.norms.paths import PATHS, tma_smem_bytes

#: Spins of the fused reduction's barrier wait before it gives up (and writes NaN).
MAX_SPINS = 1 << 20
_SYNC: dict[str, torch.Tensor] = {}
_SYNC_SLOTS = 8192


def sync_counter(device: torch.device, programs: int) -> torch.Tensor:
    """The barrier counter of a ``programs``-wide grid on ``device``: one int64 per grid size, zero at
    first and only ever incremented by ``programs`` per launch (so it is a multiple of it between launches)."""
    key = str(device)
    if key not in _SYNC:
        _SYNC[key] = torch.zeros(_SYNC_SLOTS, dtype=torch.int64, device=device)
    return _SYNC[key][programs % _SYNC_SLOTS :][:1]


def balanced_programs(n_blocks: int, slots: int) -> int:
    """Fewest programs that still finish in the least number of row-block rounds: with ``slots`` resident
    programs a program takes ``ceil(n_blocks / slots)`` blocks; ``ceil(n_blocks / that)`` programs do the
    same, so no program runs a last round alone (8192 rows on 264 slots: 256 programs of 32 rows, not 264
    of 31 or 32)."""
    slots = max(min(slots, n_blocks), 1)
    rounds = triton.cdiv(n_blocks, slots)
    return max(triton.cdiv(n_blocks, rounds), 1)


def fused_reduce_ok(t: torch.Tensor, programs: int) -> bool:
    """The fused reduction spins at a grid barrier: only on a GPU, or for a one-program grid (the
    interpreter runs programs one by one, so a grid of several would never meet)."""
    return (t.is_cuda and not interpreting()) or programs == 1


def backward_grid(
    t: torch.Tensor, n_blocks: int, programs_per_sm: int, balanced: bool, fused_reduce: bool
) -> tuple[int, bool]:
    """``(programs, fused)`` of a persistent norm backward over ``n_blocks`` row blocks: the resident programs
    (:func:`~solkit.kernels.common.rows.backward_programs`), cut to :func:`balanced_programs` when ``balanced``, and
    whether the dW reduction runs inside the kernel (``fused_reduce`` where :func:`fused_reduce_ok`)."""
    programs = backward_programs(n_blocks, t, programs_per_sm)
    if balanced:
        programs = balanced_programs(n_blocks, programs)
    return programs, fused_reduce_ok(t, programs) and fused_reduce


class BackwardPlan(NamedTuple):
    """Launch shape of a norm backward (:func:`backward_plan`)."""

    block_m: int  # rows per block (the pointer kernel)
    block_n: int  # the row's width padded to a power of two
    num_warps: int
    programs_per_sm: int
    maxnreg: int  # register cap so that programs_per_sm programs are resident
    tma_stages: int
    boxes: tuple[int, int] | None  # (R, C) of the TMA kernel, or None: the pointer kernel
    programs: int  # persistent grid
    fused: bool  # the dW reduction inside the kernel


@functools.cache
def _measured(entry: str, cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(tuned.load("norms", entry), cc)[1]


def _tma_stages(caps: DeviceCaps, runs: tuple[str, ...], asked: int | None, cfg: dict, x2: torch.Tensor,
                measured: bool) -> int:  # fmt: skip
    """Pipeline stages of the TMA backward, 0 for the pointer kernel: the caller's ``asked`` where the device runs
    the TMA path (and under the interpreter, which emulates descriptors), else the config's ``bwd_tma_stages`` where
    the device runs it. On an architecture the config was not measured on the rows must fit the part's shared
    memory per program: the stages asked for, or the most (at least 2) of the config's."""
    if asked is not None:
        if not ("tma" in runs or (caps.is_interpreter and not forced_portable())):
            return 0
        stages = asked
    else:
        stages = cfg.get("bwd_tma_stages", 0)
        if stages < 2 or "tma" not in runs:
            return 0
    if measured or caps.smem_per_block is None or stages < 2:
        return stages
    fits = [s for s in range(2, stages + 1) if tma_smem_bytes(x2.shape[1], x2.element_size(), s) <= caps.smem_per_block]
    if asked is not None:
        return stages if stages in fits else 0
    return max(fits, default=0)


def backward_plan(x2: torch.Tensor, cfg: dict, tma_tensors: list, *, block_m: int | None, num_warps: int | None,
                  programs_per_sm: int | None, tma_stages: int | None, balanced: bool | None,
                  fused_reduce: bool | None, maxnreg: int | None, ds: bool = False,
                  entry: str = "rmsnorm") -> BackwardPlan:  # fmt: skip
    """The launch shape shared by the RMSNorm and LayerNorm backwards: each setting the caller left None comes
    from the width's config ``cfg`` (``bwd_*`` keys; the ``*_ds`` ones for add+RMSNorm with ``ds``); warps so
    that each thread holds ``bwd_bytes_per_thread`` of a row tile; the TMA kernel (one row a block) where the
    device runs it (:data:`~solkit.kernels.norms.paths.PATHS` of ``entry``'s backward), the stages are > 1 and
    :func:`tma_shape` accepts ``tma_tensors``; the grid from :func:`backward_grid`. Where the config ``entry``
    ("rmsnorm" or "layernorm") was not measured on this architecture, programs per SM and stages are derived from
    the device."""
    caps = device_caps(x2)
    runs = allowed(PATHS[f"{entry}_bwd"], caps, f"{entry}_bwd")
    measured = _measured(entry, caps.cc)
    sfx = "_ds" if ds else ""
    bm, bn, _ = row_config(x2.shape[1], x2.element_size())
    bm = block_m or cfg.get("bwd_block_m") or bm
    nw = (
        num_warps
        or cfg.get("bwd_num_warps" + sfx)
        or min(max(warps_for(bm * bn, x2.element_size(), bytes_per_thread=cfg["bwd_bytes_per_thread" + sfx]), 4), 16)
    )
    tma_stages = _tma_stages(caps, runs, tma_stages, cfg, x2, measured)
    smem = tma_smem_bytes(x2.shape[1], x2.element_size(), tma_stages) if tma_stages > 1 else 0
    programs_per_sm = programs_per_sm or per_sm_for(caps, measured, cfg["bwd_programs_per_sm"], nw, smem)
    boxes = tma_shape(x2, tma_tensors) if tma_stages and tma_stages > 1 else None
    n_blocks = x2.shape[0] if boxes is not None else triton.cdiv(x2.shape[0], bm)
    programs, fused = backward_grid(
        x2, n_blocks, programs_per_sm,
        balanced=cfg.get("bwd_balanced", False) if balanced is None else balanced,
        fused_reduce=cfg.get("bwd_fused_reduce", False) if fused_reduce is None else fused_reduce,
    )  # fmt: skip
    cap = maxnreg or register_cap(programs_per_sm, nw)
    return BackwardPlan(bm, bn, nw, programs_per_sm, cap, tma_stages, boxes, programs, fused)


def reduce_tile(n_cols: int, programs: int) -> tuple[int, int]:
    """``(BLOCK_P, BLOCK_C)`` of the fused reduction: all partial rows in one tile (one round of L2 loads),
    columns cut so that there are about as many column slices as programs, the tile at most 4096 elements
    (its 64-bit addresses and values stay within the backward's register cap)."""
    block_p = triton.next_power_of_2(programs)
    block_c = triton.next_power_of_2(triton.cdiv(n_cols, programs))
    return block_p, int(min(max(block_c, 4), max(4096 // block_p, 4)))


@triton.jit
def grid_sum_partials(partial_ptr, out_ptr, sync_ptr, n_cols, row_stride, max_spins,
                      BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    """Called by every program of the grid after it stored its partial row ``partial[pid, :n_cols]``: a grid
    barrier, then this program's column slices of ``out = sum_rows(partial)`` (``out``'s dtype). The counter
    grows by the grid size per launch; a program's goal is the next multiple of it above its own ticket."""
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    tl.debug_barrier()  # every thread's partial stores are ordered before the release below
    ticket = tl.atomic_add(sync_ptr, 1, sem="release", scope="gpu")
    goal = (ticket // n_prog + 1) * n_prog
    arrived = ticket + 1
    spins = 0
    while (arrived < goal) & (spins < max_spins):
        arrived = tl.atomic_add(sync_ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    met = arrived >= goal
    prow = tl.arange(0, BLOCK_P)
    pmask = prow < n_prog
    pptr = partial_ptr + prow.to(tl.int64)[:, None] * row_stride
    for c0 in range(pid * BLOCK_C, n_cols, n_prog * BLOCK_C):
        cc = c0 + tl.arange(0, BLOCK_C)
        cmask = cc < n_cols
        part = tl.load(pptr + cc[None, :], mask=pmask[:, None] & cmask[None, :], other=0.0, volatile=True)
        total = tl.sum(part, axis=0)
        total = tl.where(met, total, float("nan"))
        tl.store(out_ptr + cc, total.to(out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows, cols, n_rows, n_cols, x_stride, dy_stride, ds_stride,
               HAS_DS: tl.constexpr):  # fmt: skip
    """One row block's backward inputs, unconverted: ``(x, dy, rstd, ds)`` (``ds`` is ``dy`` without it)."""
    x = load_tile(x_ptr, rows, x_stride, cols, n_rows, n_cols)
    dy = load_tile(dy_ptr, rows, dy_stride, cols, n_rows, n_cols)
    rstd = tl.load(rstd_ptr + rows, mask=rows < n_rows, other=0.0)
    ds = dy
    if HAS_DS:
        ds = load_tile(ds_ptr, rows, ds_stride, cols, n_rows, n_cols)
    return x, dy, rstd, ds


@triton.jit
def _two_pass_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, w, rows, cols, n_rows, n_cols, x_stride, dy_stride, ds_stride,
                    HAS_DS: tl.constexpr):  # fmt: skip
    """``TWO_PASS``: pass 1 reads the row block (kept in L1: ``evict_last``) only for ``c = mean(g * xhat)``;
    returns the block re-read (``evict_first``) for pass 2, its rstd, and ``c`` in the ``ds`` slot."""
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    r64 = rows.to(tl.int64)[:, None]
    rstd = tl.load(rstd_ptr + rows, mask=rows < n_rows, other=0.0)
    x = tl.load(x_ptr + r64 * x_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
    dy = tl.load(dy_ptr + r64 * dy_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
    c = tl.sum(dy.to(tl.float32) * w[None, :] * (x.to(tl.float32) * rstd[:, None]), axis=1) / n_cols
    x = tl.load(x_ptr + r64 * x_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    dy = tl.load(dy_ptr + r64 * dy_stride + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    return x, dy, rstd, c


@triton.jit
def _rmsnorm_bwd_kernel(
    dy_ptr, ds_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, dw_ptr, sync_ptr,
    n_rows, n_cols, dy_stride, ds_stride, x_stride, dx_stride, offset, max_spins,
    HAS_DS: tl.constexpr, GEMMA: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FUSED: tl.constexpr = False, W_RELOAD: tl.constexpr = False,
    RED_P: tl.constexpr = 1, RED_C: tl.constexpr = 1, TWO_PASS: tl.constexpr = False,
):  # fmt: skip
    """Persistent RMSNorm backward: program ``p`` takes row blocks ``p, p + P, ...``. ``PREFETCH`` (1 or 2):
    the next one or two row blocks' x, dy, rstd (and ds) are loaded before this one is computed (a register
    ring; a per-row statistic loaded at use would expose its latency every row). ``W_RELOAD``: the weight is
    re-read (from L1) per row block instead of held in registers, which frees them for the ring. ``FUSED``:
    the dW partial rows are summed by this kernel after a grid barrier (:func:`grid_sum_partials`).
    ``TWO_PASS`` (no ring): per row block, pass 1 reads x and dy for the row sum only, pass 2 re-reads them
    (from L1: the eviction hints differ, so the compiler keeps both loads) for dx and dW, so a program holds
    little besides its dW accumulator and several programs an SM keep the DRAM busy (the shape of the
    one-piece forward)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    if not W_RELOAD:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    rows1 = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    if PREFETCH > 0 and not TWO_PASS:
        x1, dy1, r1, ds1 = _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows1, cols, n_rows, n_cols,
                                      x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
    if PREFETCH == 2 and not TWO_PASS:
        rows2 = rows1 + step * BLOCK_M
        x2, dy2, r2, ds2 = _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows2, cols, n_rows, n_cols,
                                      x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
    for block in range(pid, tl.cdiv(n_rows, BLOCK_M), step):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        if TWO_PASS:
            if W_RELOAD:
                w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
            x, dy, rstd, ds = _two_pass_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, w, rows, cols, n_rows, n_cols,
                                              x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
        elif PREFETCH == 0:
            x, dy, rstd, ds = _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows, cols, n_rows, n_cols,
                                         x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
        else:
            x, dy, rstd, ds = x1, dy1, r1, ds1
            if PREFETCH == 2:
                x1, dy1, r1, ds1 = x2, dy2, r2, ds2
                x2, dy2, r2, ds2 = _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows + 2 * step * BLOCK_M, cols,
                                              n_rows, n_cols, x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
            else:
                x1, dy1, r1, ds1 = _bwd_tiles(x_ptr, dy_ptr, ds_ptr, rstd_ptr, rows + step * BLOCK_M, cols,
                                              n_rows, n_cols, x_stride, dy_stride, ds_stride, HAS_DS)  # fmt: skip
        if W_RELOAD and not TWO_PASS:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        x, dy = x.to(tl.float32), dy.to(tl.float32)
        xhat = x * rstd[:, None]
        if GEMMA:
            dw_acc += dy * xhat
        else:
            dw_acc += dy * xhat.to(x_ptr.dtype.element_ty).to(tl.float32)
        g = dy * w[None, :]
        if TWO_PASS:
            c = ds  # the row sums of pass 1 (ds, if any, is added from its own load below)
        else:
            c = tl.sum(g * xhat, axis=1) / n_cols
        dx = (g - xhat * c[:, None]) * rstd[:, None]
        if HAS_DS:
            if TWO_PASS:
                dx += load_tile(ds_ptr, rows, ds_stride, cols, n_rows, n_cols).to(tl.float32)
            else:
                dx += ds.to(tl.float32)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        dx_ptrs = dx_ptr + rows.to(tl.int64)[:, None] * dx_stride + cols[None, :]
        tl.store(dx_ptrs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dw_partial_ptr + pid * n_cols + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    if FUSED:
        grid_sum_partials(dw_partial_ptr, dw_ptr, sync_ptr, n_cols, n_cols, max_spins, RED_P, RED_C)


#: The RMSNorm backward kernel (its underscored name is the kernel name profilers and Triton's caches see).
rmsnorm_bwd_kernel = _rmsnorm_bwd_kernel


@triton.jit
def _row_boxes(ptr, n_rows, R: tl.constexpr, C: tl.constexpr):
    """A TMA descriptor of ``n_rows`` contiguous rows of ``R * C`` elements as a ``[n_rows * R, C]`` view: row
    ``r`` is the ``[R, C]`` box at ``[r * R, 0]``."""
    return tl.make_tensor_descriptor(ptr, shape=[n_rows * R, C], strides=[C, 1], block_shape=[R, C])


@triton.jit
def _tma_rows(x_ptr, dy_ptr, dx_ptr, ds_ptr, n_rows, R: tl.constexpr, C: tl.constexpr, HAS_DS: tl.constexpr):
    """The TMA backwards' preamble: (program, grid step, the row-box descriptors of x, dy, dx and, with ``HAS_DS``,
    ds (else dx's again), a row's offsets as an ``[R, C]`` tile)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    xd = _row_boxes(x_ptr, n_rows, R, C)
    dyd = _row_boxes(dy_ptr, n_rows, R, C)
    dxd = _row_boxes(dx_ptr, n_rows, R, C)
    dsd = dxd
    if HAS_DS:
        dsd = _row_boxes(ds_ptr, n_rows, R, C)
    return pid, step, xd, dyd, dxd, dsd, tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]


@triton.jit
def _rmsnorm_bwd_tma_kernel(
    dy_ptr, ds_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, dw_ptr, sync_ptr,
    n_rows, offset, max_spins,
    HAS_DS: tl.constexpr, GEMMA: tl.constexpr, R: tl.constexpr, C: tl.constexpr, STAGES: tl.constexpr,
    FUSED: tl.constexpr, RED_P: tl.constexpr, RED_C: tl.constexpr,
):  # fmt: skip
    """The persistent RMSNorm backward with TMA loads: each row (``R * C`` contiguous elements) is one
    ``[R, C]`` box of a ``[n_rows * R, C]`` view, and Triton's pipeliner keeps ``STAGES - 1`` rows of x and dy
    in flight in shared memory (a register ring cannot hold more than one at 4096 columns and two programs
    an SM). rstd is loaded one row ahead (a scalar ring); dx goes out through a TMA store."""
    n_cols = R * C
    pid, step, xd, dyd, dxd, dsd, offs = _tma_rows(x_ptr, dy_ptr, dx_ptr, ds_ptr, n_rows, R, C, HAS_DS)
    w = tl.load(w_ptr + offs).to(tl.float32) + offset
    dw_acc = tl.zeros([R, C], dtype=tl.float32)
    rstd_next = tl.load(rstd_ptr + pid, mask=pid < n_rows, other=0.0)
    for row in tl.range(pid, n_rows, step, num_stages=STAGES):
        rstd = rstd_next
        rstd_next = tl.load(rstd_ptr + row + step, mask=row + step < n_rows, other=0.0)
        x = xd.load([row * R, 0]).to(tl.float32)
        dy = dyd.load([row * R, 0]).to(tl.float32)
        xhat = x * rstd
        if GEMMA:
            dw_acc += dy * xhat
        else:
            dw_acc += dy * xhat.to(x_ptr.dtype.element_ty).to(tl.float32)
        g = dy * w
        c = tl.sum(tl.sum(g * xhat, axis=1), axis=0) / n_cols
        dx = (g - xhat * c) * rstd
        if HAS_DS:
            dx += dsd.load([row * R, 0]).to(tl.float32)
        dxd.store([row * R, 0], dx.to(dx_ptr.dtype.element_ty))
    tl.store(dw_partial_ptr + pid * n_cols + offs, dw_acc)
    if FUSED:
        grid_sum_partials(dw_partial_ptr, dw_ptr, sync_ptr, n_cols, n_cols, max_spins, RED_P, RED_C)


def tma_shape(x2: torch.Tensor, tensors: list) -> tuple[int, int] | None:
    """``(R, C)`` boxes of one row for the TMA backward (C = 256 columns, R = rows of them), or None when the
    rows do not fit that view: width not a power of two of at least 256 and at most 16384, non-contiguous
    rows, or a base address not 16-byte aligned."""
    n_rows, n_cols = x2.shape
    if n_cols < 256 or n_cols > 16384 or n_cols & (n_cols - 1):
        return None
    for t in tensors:
        if t is not None and (t.stride(0) != n_cols or t.data_ptr() % 16):
            return None
    return n_cols // 256, 256


def launch_rmsnorm_bwd_tma(dy2, ds2, x2, weight, rstd, dx2, partial, dw, fused, programs, offset, gemma, stages,
                           num_warps, maxnreg, shape) -> None:  # fmt: skip
    """Launch :func:`_rmsnorm_bwd_tma_kernel` (Triton's descriptor scratch allocator set first)."""
    use_descriptor_scratch()
    red_p, red_c = reduce_tile(x2.shape[1], programs)
    _rmsnorm_bwd_tma_kernel[(programs,)](
        dy2, ds2 if ds2 is not None else dy2, x2, weight, rstd, dx2, partial, dw,
        sync_counter(x2.device, programs) if fused else partial, x2.shape[0], offset, MAX_SPINS,
        HAS_DS=ds2 is not None, GEMMA=gemma, R=shape[0], C=shape[1], STAGES=stages, FUSED=fused, RED_P=red_p,
        RED_C=red_c, num_warps=num_warps, maxnreg=maxnreg,
    )  # fmt: skip


@triton.jit
def add_pairs(a0, b0, a1, b1):
    """Combine function of a two-sum tuple reduction (``tl.reduce((a, b), axis, add_pairs)``)."""
    return a0 + a1, b0 + b1


@triton.jit
def _layernorm_bwd_tma_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr, sums_ptr, sync_ptr, n_rows, max_spins,
    HAS_BIAS: tl.constexpr, R: tl.constexpr, C: tl.constexpr, STAGES: tl.constexpr, FUSED: tl.constexpr,
    RED_P: tl.constexpr, RED_C: tl.constexpr,
):  # fmt: skip
    """LayerNorm's backward in the shape of :func:`_rmsnorm_bwd_tma_kernel` (rows as ``[R, C]`` TMA boxes,
    pipelined through shared memory; mean and rstd one row ahead): ``dx = rstd * (g - mean(g) - xhat *
    mean(g * xhat))`` with both row sums in one tuple reduction; partial rows ``[dw | db]``."""
    n_cols = R * C
    pid, step, xd, dyd, dxd, _dsd, offs = _tma_rows(x_ptr, dy_ptr, dx_ptr, dx_ptr, n_rows, R, C, False)
    w = tl.load(w_ptr + offs).to(tl.float32)
    dw_acc = tl.zeros([R, C], dtype=tl.float32)
    db_acc = tl.zeros([R, C], dtype=tl.float32)
    mean_next = tl.load(mean_ptr + pid, mask=pid < n_rows, other=0.0)
    rstd_next = tl.load(rstd_ptr + pid, mask=pid < n_rows, other=0.0)
    for row in tl.range(pid, n_rows, step, num_stages=STAGES):
        mean, rstd = mean_next, rstd_next
        mean_next = tl.load(mean_ptr + row + step, mask=row + step < n_rows, other=0.0)
        rstd_next = tl.load(rstd_ptr + row + step, mask=row + step < n_rows, other=0.0)
        x = xd.load([row * R, 0]).to(tl.float32)
        dy = dyd.load([row * R, 0]).to(tl.float32)
        xhat = (x - mean) * rstd
        dw_acc += dy * xhat
        if HAS_BIAS:
            db_acc += dy
        g = dy * w
        sum_gx, sum_g = tl.reduce((g * xhat, g), 1, add_pairs)
        sum_gx, sum_g = tl.reduce((sum_gx, sum_g), 0, add_pairs)
        dx = (g - sum_g / n_cols - xhat * (sum_gx / n_cols)) * rstd
        dxd.store([row * R, 0], dx.to(dx_ptr.dtype.element_ty))
    tl.store(partial_ptr + pid * 2 * n_cols + offs, dw_acc)
    if HAS_BIAS:
        tl.store(partial_ptr + pid * 2 * n_cols + n_cols + offs, db_acc)
    if FUSED:
        grid_sum_partials(partial_ptr, sums_ptr, sync_ptr, 2 * n_cols if HAS_BIAS else n_cols, 2 * n_cols,
                          max_spins, RED_P, RED_C)  # fmt: skip


def launch_layernorm_bwd_tma(dy2, x2, weight, mean, rstd, dx2, partial, sums, fused, programs, has_bias, stages,
                             num_warps, maxnreg, shape) -> None:  # fmt: skip
    """Launch :func:`_layernorm_bwd_tma_kernel` (Triton's descriptor scratch allocator set first)."""
    use_descriptor_scratch()
    red_p, red_c = reduce_tile(2 * x2.shape[1] if has_bias else x2.shape[1], programs)
    _layernorm_bwd_tma_kernel[(programs,)](
        dy2, x2, weight, mean, rstd, dx2, partial, sums, sync_counter(x2.device, programs) if fused else partial,
        x2.shape[0], MAX_SPINS, HAS_BIAS=has_bias, R=shape[0], C=shape[1], STAGES=stages, FUSED=fused,
        RED_P=red_p, RED_C=red_c, num_warps=num_warps, maxnreg=maxnreg,
    )  # fmt: skip
