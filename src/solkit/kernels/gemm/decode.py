"""Decode-sized GEMM with the fused epilogue: ``y = act(x @ W.T + bias) * alpha + residual * beta``, M <= 64.

With a handful of rows the op is a stream of the weight: N*K*itemsize bytes (32 MiB for N = K = 4096
in bf16, 7.9 us at 4.25 TB/s) against M*(K + 2N)*itemsize for x, the residual and y. What matters is
that every SM streams W at once, with enough bytes in flight, and that the launch leaves no tail.

The program body, knobs all compile-time:

* ``BLOCK_M == 1`` (M = 1): a GEMV without tensor cores. Each program keeps a [BLOCK_N, BLOCK_K]
  fp32 partial product in registers and reduces it over K once, after the loop; with ``RED_EACH`` 1
  it reduces every W block into a [BLOCK_N] fp32 vector right away instead (a cross-thread sum per
  block, about half the registers: more programs per SM). ``PIPE`` 2 double-buffers the W block in
  registers (the next block's loads in flight during this block's FMAs).
* ``BLOCK_M >= 16``: ``tl.dot`` on [BLOCK_M, BLOCK_K] x [BLOCK_K, BLOCK_N] tiles (rows past M are
  masked, so they cost no traffic), with ``num_stages`` cp.async buffers of W in flight.
* ``SPLIT_K > 1``: the K range is cut into SPLIT_K pieces, one program each, so a narrow N still
  gives enough programs to fill the SMs. Each piece stores its fp32 partial [BLOCK_M, BLOCK_N] tile
  to a workspace (L2-resident: SPLIT_K * M * N * 4 bytes), then takes a ticket from a per-tile
  counter; the program that draws the last ticket sums the pieces, runs the epilogue, stores y and
  resets the counter to zero for the next call (keeping its own partial in registers). No second
  kernel, no memset.
* ``W_TMA``: 1 reads W (and x, for BLOCK_M > 1) by TMA into shared memory with descriptors each
  program makes on the device; 2 with descriptors made on the host (a second kernel over the same
  body; making them on the device costs time in every call, docs/kernels/gemm-decode.md). The 1-row
  GEMV then keeps ``STAGES`` loads in flight. Operands TMA cannot address fall back to 0.
* ``PERSIST`` > 0 (the 1-row GEMV over whole rows only: BLOCK_M 1, SPLIT_K 1, W_TMA 0, BLOCK_K >= K;
  ignored elsewhere): PERSIST programs per SM walk the row tiles grid-stride (at any moment neighbouring
  programs read neighbouring rows), x is read once into registers, and the next tile's W rows and
  residual are loaded before this tile's products, so loads stay in flight across the epilogue.
* ``PRE_RES``: the residual's DRAM latency off the tail: 1 the tile into registers before the K loop,
  2 an L2 prefetch then (no registers held). ``EVICT_W``: evict_first on pointer loads of W.
  ``STAGGER``: program pid_n starts its K walk at block pid_n and wraps around (GEMV double buffer and
  TMA paths), so programs stop reading the same columns in lock-step.

The ordering of that hand-off is the classic one (CUTLASS's serial split-K semaphore): all threads
store, a CTA barrier, then one gpu-scope acq_rel atomic; the last program reads the partials from L2
(``.cg``: never a stale L1 line).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from solkit.kernels.common.device import cuda_sm_count, interpreting, use_descriptor_scratch
from solkit.kernels.common.rows import grown_scratch
from solkit.kernels.gemm.epilogue import apply_epilogue


@triton.jit
def _load_wx(w_ptrs, x_ptrs, k, K, offs_k, row_ok, live, EVEN_K: tl.constexpr, EVICT_W: tl.constexpr):
    """The W [BLOCK_N, BLOCK_K] and x [BLOCK_M, BLOCK_K] blocks at K offset k; nothing is read unless
    ``live`` (a prefetch past the end of the piece). EVICT_W: the weight is read once, so its lines go
    first (evict_first), and x (re-read by every program) stays."""
    EVICT: tl.constexpr = "evict_first" if EVICT_W else ""
    if EVEN_K:
        # a block-shaped mask, uniform along K: the loads stay vectorised (and the interpreter takes it)
        w = tl.load(w_ptrs, mask=tl.full(w_ptrs.shape, True, tl.int1) & live, other=0.0, eviction_policy=EVICT)
        xk = tl.load(x_ptrs, mask=tl.full(x_ptrs.shape, True, tl.int1) & row_ok[:, None] & live, other=0.0)
    else:
        k_ok = tl.full(offs_k.shape, True, tl.int1) & ((k + offs_k) < K) & live
        w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0, eviction_policy=EVICT)
        xk = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
    return w, xk


@triton.jit
def _decode_program(
    x_desc, w_desc, x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, part_ptr, count_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    PIPE: tl.constexpr, EVEN_K: tl.constexpr, W_TMA: tl.constexpr, PRE_RES: tl.constexpr, EVICT_W: tl.constexpr,
    STAGES: tl.constexpr, STAGGER: tl.constexpr, RED_EACH: tl.constexpr,
):  # fmt: skip
    """Program (n tile, K piece, m tile); each K piece is whole BLOCK_K steps, the last one may be short.
    x_desc / w_desc: TMA descriptors of x and W when W_TMA (made on the device or passed from the host)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    K_SPLIT = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_lo = pid_k * K_SPLIT
    k_hi = tl.minimum(k_lo + K_SPLIT, K)
    row_ok = offs_m < M
    mask = row_ok[:, None] & (offs_n[None, :] < N)
    res = None
    # The residual's DRAM latency off the tail, behind the weight stream (every split piece asks for it:
    # whichever is last uses it). PRE_RES 1: the tile into registers now; 2: an L2 prefetch now, the
    # epilogue's load then hits L2 (no registers held through the K loop).
    if HAS_RESIDUAL and PRE_RES == 1:
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
    if HAS_RESIDUAL and PRE_RES == 2:
        _prefetch_rows_l2(res_ptr, offs_m, pid_n * BLOCK_N, M, N, stride_rm, BLOCK_N)
    if W_TMA:
        acc = _stream_tma(x_desc, w_desc, x_ptr, K, stride_xm, pid_m * BLOCK_M, pid_n * BLOCK_N, k_lo, k_hi, pid_n,
                          BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, STAGES, STAGGER, RED_EACH)  # fmt: skip
    else:
        acc = _stream_pointer(x_ptr, w_ptr, K, stride_xm, stride_wn, offs_m, offs_n, offs_k, row_ok, N, k_lo, k_hi,
                              pid_n, BLOCK_M, BLOCK_N, BLOCK_K, PIPE, EVEN_K, EVICT_W, STAGGER, RED_EACH)  # fmt: skip

    if SPLIT_K == 1:
        if HAS_RESIDUAL and PRE_RES != 1:
            res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
        out = apply_epilogue(acc, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # partials: [SPLIT_K, M, N] fp32, row-major
        tile_offs = offs_m[:, None] * N + offs_n[None, :]
        tl.store(part_ptr + pid_k * M * N + tile_offs, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the ticket is drawn
        tile = pid_m * tl.num_programs(0) + pid_n
        ticket = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            total = acc  # its own piece is still in registers: only the other pieces are read back
            for s in tl.static_range(SPLIT_K):
                total += tl.load(part_ptr + s * M * N + tile_offs, mask=mask & (tile_offs * 0 + pid_k != s), other=0.0,
                                 cache_modifier=".cg")  # fmt: skip
            if HAS_RESIDUAL and PRE_RES != 1:
                res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
            out = apply_epilogue(total, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
            tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call


@triton.jit(do_not_specialize=["M", "M_BUCKET"])
def _gemm_decode_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, part_ptr, count_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    PIPE: tl.constexpr, EVEN_K: tl.constexpr, W_TMA: tl.constexpr = 0, PRE_RES: tl.constexpr = 0,
    EVICT_W: tl.constexpr = 0, STAGES: tl.constexpr = 3, STAGGER: tl.constexpr = 0, RED_EACH: tl.constexpr = 0,
    PERSIST: tl.constexpr = 0,
):  # fmt: skip
    """The decode GEMM; with W_TMA 1 each program makes its TMA descriptors in global scratch."""
    if PERSIST:
        _gemv_persist(x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, N, K, stride_xm, stride_wn, stride_ym, stride_rm, alpha,
                      beta, HAS_BIAS, HAS_RESIDUAL, ACT, BLOCK_N, BLOCK_K, EVEN_K, EVICT_W)  # fmt: skip
    else:
        x_desc = None
        w_desc = None
        if W_TMA:
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                               block_shape=[BLOCK_N, BLOCK_K])  # fmt: skip
            if BLOCK_M > 1:  # the GEMV reads its x row by plain loads
                x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1],
                                                   block_shape=[BLOCK_M, BLOCK_K])  # fmt: skip
        _decode_program(x_desc, w_desc, x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, part_ptr, count_ptr, M, N, K, M_BUCKET,
                        stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT, BLOCK_M,
                        BLOCK_N, BLOCK_K, SPLIT_K, PIPE, EVEN_K, W_TMA, PRE_RES, EVICT_W, STAGES, STAGGER,
                        RED_EACH)  # fmt: skip


@triton.jit(do_not_specialize=["M", "M_BUCKET"])
def _gemm_decode_host_tma_kernel(
    x_desc, w_desc, x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, part_ptr, count_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    PIPE: tl.constexpr, EVEN_K: tl.constexpr, W_TMA: tl.constexpr = 0, PRE_RES: tl.constexpr = 0,
    EVICT_W: tl.constexpr = 0, STAGES: tl.constexpr = 3, STAGGER: tl.constexpr = 0, RED_EACH: tl.constexpr = 0,
    PERSIST: tl.constexpr = 0,
):  # fmt: skip
    """The decode GEMM with W_TMA 2: the TMA descriptors come from the host as kernel parameters (no
    descriptor writes and fences in the prologue)."""
    _decode_program(x_desc, w_desc, x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, part_ptr, count_ptr, M, N, K, M_BUCKET,
                    stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT, BLOCK_M,
                    BLOCK_N, BLOCK_K, SPLIT_K, PIPE, EVEN_K, W_TMA, PRE_RES, EVICT_W, STAGES, STAGGER,
                    RED_EACH)  # fmt: skip


@triton.jit
def _row_tile(w_ptr, res_ptr, row, tile, N, stride_wn, stride_rm, offs_b, offs_k, k_ok, live,
              HAS_RESIDUAL: tl.constexpr, EVICT_W: tl.constexpr):  # fmt: skip
    """W rows [tile * BLOCK_N, +BLOCK_N) over the whole K (rows past N read row 0, never stored) and the
    residual's [1, BLOCK_N] piece of output row ``row`` (fp32; zeros without a residual); nothing unless live."""
    rows = tile * offs_b.shape[0] + offs_b
    safe = tl.where(rows < N, rows, 0)
    EVICT: tl.constexpr = "evict_first" if EVICT_W else ""
    k_live = tl.full(offs_k.shape, True, tl.int1) & k_ok & live  # 1-D first: the interpreter keeps it boolean
    w = tl.load(w_ptr + safe[:, None] * stride_wn + offs_k[None, :], mask=k_live[None, :], other=0.0,
                eviction_policy=EVICT)  # fmt: skip
    r = tl.zeros([1, offs_b.shape[0]], dtype=tl.float32)
    if HAS_RESIDUAL:
        n_live = tl.full(offs_b.shape, True, tl.int1) & (rows < N) & live
        r = tl.load(res_ptr + row * stride_rm + rows[None, :], mask=n_live[None, :], other=0.0)
        r = r.to(tl.float32)
    return w, r


@triton.jit
def _gemv_persist(x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, N, K, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
                  HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, EVICT_W: tl.constexpr):  # fmt: skip
    """PERSIST: y[row, tiles] for output row program_id(2), row tiles pid, pid + G, ... (G programs); BLOCK_K >= K.
    x once into registers; the next tile's W rows and residual in flight while this tile is summed and stored."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    row = tl.program_id(2)
    n_tiles = tl.cdiv(N, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_ok = (offs_k < K) | EVEN_K  # all true (folded) when BLOCK_K == K
    xk = tl.load(x_ptr + row * stride_xm + offs_k, mask=k_ok, other=0.0)
    w_nx, r_nx = _row_tile(w_ptr, res_ptr, row, pid, N, stride_wn, stride_rm, offs_b, offs_k, k_ok, pid < n_tiles,
                           HAS_RESIDUAL, EVICT_W)  # fmt: skip
    for tile in range(pid, n_tiles, step):
        w = w_nx
        r = r_nx
        nxt = tile + step
        w_nx, r_nx = _row_tile(w_ptr, res_ptr, row, tl.minimum(nxt, n_tiles - 1), N, stride_wn, stride_rm, offs_b,
                               offs_k, k_ok, nxt < n_tiles, HAS_RESIDUAL, EVICT_W)  # fmt: skip
        acc = tl.sum(w.to(tl.float32) * xk.to(tl.float32)[None, :], axis=1)[None, :]
        offs_n = tile * BLOCK_N + offs_b
        out = apply_epilogue(acc, offs_n, N, bias_ptr, r, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
        tl.store(y_ptr + row * stride_ym + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=(offs_n < N)[None, :])


@triton.jit
def _prefetch_rows_l2(ptr, offs_m, off_n, M, N, stride_m, BLOCK_N: tl.constexpr):
    """Ask L2 for rows ``offs_m`` x columns [off_n, off_n + BLOCK_N) of a row-major matrix: one prefetch per
    128-byte line (one per row when the tile is narrower than a line)."""
    LINE: tl.constexpr = 1024 // ptr.dtype.element_ty.primitive_bitwidth  # elements per 128 bytes
    LINES: tl.constexpr = BLOCK_N // LINE if BLOCK_N >= LINE else 1
    rows = tl.minimum(offs_m, M - 1)
    cols = tl.minimum(off_n + tl.arange(0, LINES) * LINE, N - 1)
    lines = ptr + rows[:, None] * stride_m + cols[None, :]
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n mov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _gemv_acc(part2, part1, w, xk, RED_EACH: tl.constexpr):
    """One W block of the GEMV: the products into the [BLOCK_N, BLOCK_K] partial (reduced after the loop), or
    with RED_EACH reduced over K now into the [BLOCK_N] running sum (no block-sized accumulator held)."""
    prod = w.to(tl.float32) * xk.to(tl.float32)
    if RED_EACH:
        part1 += tl.sum(prod, axis=1)
    else:
        part2 += prod
    return part2, part1


@triton.jit
def _stream_pointer(x_ptr, w_ptr, K, stride_xm, stride_wn, offs_m, offs_n, offs_k, row_ok, N, k_lo, k_hi, shift,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PIPE: tl.constexpr,
                    EVEN_K: tl.constexpr, EVICT_W: tl.constexpr, STAGGER: tl.constexpr,
                    RED_EACH: tl.constexpr):  # fmt: skip
    """x[rows] @ W[cols, k_lo:k_hi].T by pointer loads: fp32 [BLOCK_M, BLOCK_N] (BLOCK_M 1: FMA, else tl.dot)."""
    # Out-of-range W rows (the last N tile only) read row 0 instead of being masked, so the W loads
    # stay unmasked and vectorised; their columns are never stored.
    rows_w = tl.where(offs_n < N, offs_n, 0)
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + (k_lo + offs_k)[None, :]
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k_lo + offs_k)[None, :]
    if BLOCK_M == 1:
        part2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        part1 = tl.zeros((BLOCK_N,), dtype=tl.float32)  # RED_EACH: the running sum, reduced block by block
        if PIPE == 1:
            for k in range(k_lo, k_hi, BLOCK_K):
                w, xk = _load_wx(w_ptrs, x_ptrs, k, K, offs_k, row_ok, k < k_hi, EVEN_K, EVICT_W)
                part2, part1 = _gemv_acc(part2, part1, w, xk, RED_EACH)
                w_ptrs += BLOCK_K
                x_ptrs += BLOCK_K
        elif STAGGER:
            # the double buffer below, walking the piece from block `shift` on and wrapping around; the
            # pointers move by a scalar step (one pointer tensor live, as without the stagger)
            n_safe = tl.maximum(tl.cdiv(k_hi - k_lo, BLOCK_K), 1)
            start = shift % n_safe
            kc = k_lo + start * BLOCK_K
            w_ptrs += start * BLOCK_K
            x_ptrs += start * BLOCK_K
            w_nx, x_nx = _load_wx(w_ptrs, x_ptrs, kc, K, offs_k, row_ok, k_lo < k_hi, EVEN_K, EVICT_W)
            for i in range(k_lo, k_hi, BLOCK_K):
                w = w_nx
                xk = x_nx
                wrap = (start + (i - k_lo) // BLOCK_K + 1) % n_safe == 0
                step = tl.where(wrap, BLOCK_K - n_safe * BLOCK_K, BLOCK_K)
                w_ptrs += step
                x_ptrs += step
                kc += step
                w_nx, x_nx = _load_wx(w_ptrs, x_ptrs, kc, K, offs_k, row_ok, i + BLOCK_K < k_hi, EVEN_K, EVICT_W)
                part2, part1 = _gemv_acc(part2, part1, w, xk, RED_EACH)
        else:
            # register double buffer: the next block's loads are issued before this block's FMAs, so
            # two blocks per program are in flight (no cp.async pipelining without tl.dot)
            w_nx, x_nx = _load_wx(w_ptrs, x_ptrs, k_lo, K, offs_k, row_ok, k_lo < k_hi, EVEN_K, EVICT_W)
            for k in range(k_lo, k_hi, BLOCK_K):
                w = w_nx
                xk = x_nx
                w_ptrs += BLOCK_K
                x_ptrs += BLOCK_K
                w_nx, x_nx = _load_wx(w_ptrs, x_ptrs, k + BLOCK_K, K, offs_k, row_ok, k + BLOCK_K < k_hi, EVEN_K,
                                      EVICT_W)  # fmt: skip
                part2, part1 = _gemv_acc(part2, part1, w, xk, RED_EACH)
        acc = (part1 if RED_EACH else tl.sum(part2, axis=1))[None, :]
    else:
        PRECISION: tl.constexpr = "ieee" if x_ptr.dtype.element_ty == tl.float32 else "tf32"
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        EVICT: tl.constexpr = "evict_first" if EVICT_W else ""
        for k in range(k_lo, k_hi, BLOCK_K):
            if EVEN_K:
                w = tl.load(w_ptrs, eviction_policy=EVICT)
                xk = tl.load(x_ptrs, mask=row_ok[:, None], other=0.0)
            else:
                k_ok = (k + offs_k) < K
                w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0, eviction_policy=EVICT)
                xk = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(xk, tl.trans(w), acc, input_precision=PRECISION)
            w_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
    return acc


@triton.jit
def _stream_tma(x_desc, w_desc, x_ptr, K, stride_xm, off_m, off_n, k_lo, k_hi, shift, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, STAGES: tl.constexpr,
                STAGGER: tl.constexpr, RED_EACH: tl.constexpr):  # fmt: skip
    """The same product with W (and x, for BLOCK_M > 1) read by TMA into shared memory; TMA zero-fills rows
    past N or M and columns past K, so no masks. GEMV: STAGES loads in flight; tl.dot: num_stages."""
    if BLOCK_M == 1:
        offs_k = tl.arange(0, BLOCK_K)
        part2 = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        part1 = tl.zeros((BLOCK_N,), dtype=tl.float32)
        # without a tl.dot the pipeliner leaves the loop alone unless asked: STAGES TMA loads in flight
        n_safe = tl.maximum(tl.cdiv(k_hi - k_lo, BLOCK_K), 1)
        for kk in tl.range(k_lo, k_hi, BLOCK_K, num_stages=STAGES):
            k = kk
            if STAGGER:
                k = k_lo + ((kk - k_lo) // BLOCK_K + shift) % n_safe * BLOCK_K
            w = w_desc.load([off_n, k])
            if EVEN_K:
                xk = tl.load(x_ptr + off_m * stride_xm + k + offs_k)
            else:
                xk = tl.load(x_ptr + off_m * stride_xm + k + offs_k, mask=k + offs_k < K, other=0.0)
            part2, part1 = _gemv_acc(part2, part1, w, xk[None, :], RED_EACH)
        acc = (part1 if RED_EACH else tl.sum(part2, axis=1))[None, :]
    else:
        PRECISION: tl.constexpr = "ieee" if x_ptr.dtype.element_ty == tl.float32 else "tf32"
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        n_safe = tl.maximum(tl.cdiv(k_hi - k_lo, BLOCK_K), 1)
        for kk in range(k_lo, k_hi, BLOCK_K):
            k = kk
            if STAGGER:
                k = k_lo + ((kk - k_lo) // BLOCK_K + shift) % n_safe * BLOCK_K
            xk = x_desc.load([off_m, k])
            w = w_desc.load([off_n, k])
            acc = tl.dot(xk, w.T, acc, input_precision=PRECISION)
    return acc


def tma_usable(args: dict[str, Any]) -> int:
    """W_TMA as configured, or 0 where TMA cannot address the operands (16-byte aligned bases and rows)."""
    if not args.get("W_TMA", 0):
        return 0
    es = args["w_ptr"].element_size()
    ok = all(t.data_ptr() % 16 == 0 for t in (args["x_ptr"], args["w_ptr"]))
    ok = ok and (args["stride_wn"] * es) % 16 == 0 and (args["stride_xm"] * es) % 16 == 0
    return int(args["W_TMA"]) if ok else 0


def _persist(args: dict[str, Any]) -> int:
    """PERSIST as configured where the persistent whole-row GEMV applies (BLOCK_M 1, SPLIT_K 1, no TMA,
    BLOCK_K >= K), else 0 (the config's ordinary grid)."""
    per_sm = int(args.get("PERSIST", 0))
    whole_rows = args["BLOCK_M"] == 1 and int(args.get("SPLIT_K", 1)) == 1 and args["BLOCK_K"] >= args["K"]
    return per_sm if whole_rows and not tma_usable(args) else 0


def _pre_res(args: dict[str, Any]) -> int:
    """PRE_RES as configured; the L2 prefetch (2) is inline PTX, which the interpreter cannot run: none there."""
    pre = int(args.get("PRE_RES", 0))
    return 0 if pre == 2 and interpreting() else pre


#: compile-time defaults of the knobs a config may leave out (W_TMA 0: pointer loads)
KNOB_DEFAULTS = {"W_TMA": 0, "PRE_RES": 0, "EVICT_W": 0, "STAGES": 3, "STAGGER": 0, "RED_EACH": 0, "PERSIST": 0}


class _DecodeLauncher(triton.runtime.Heuristics):
    """triton.heuristics (EVEN_K, the knobs' defaults, W_TMA only where TMA can address the operands),
    then by W_TMA: 0 the kernel with pointer loads, 1 the same kernel making its TMA descriptors on the
    device (Triton's scratch allocator is set first; the prefill path sets the same one, but decode may
    run first), 2 the kernel taking host-made descriptors as parameters."""

    def run(self, *args, **kwargs):
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        for name, heur in self.values.items():
            kwargs[name] = heur({**named, **kwargs})
        if kwargs["W_TMA"] == 1:
            use_descriptor_scratch()
        if kwargs["W_TMA"] != 2:
            return self.fn.run(*args, **kwargs)
        bm, bn, bk = kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"]
        x, w = named["x_ptr"], named["w_ptr"]
        M, N, K = named["M"], named["N"], named["K"]
        w_desc = TensorDescriptor(w, [N, K], [named["stride_wn"], 1], [bn, bk])
        x_desc = TensorDescriptor(x, [M, K], [named["stride_xm"], 1], [bm, bk]) if bm > 1 else None
        return _gemm_decode_host_tma_kernel.run(x_desc, w_desc, *args, **kwargs)


#: The bare JIT function (what ahead-of-time compilation needs); its underscored name is the kernel name
#: profilers and Triton's caches see.
gemm_decode_jit = _gemm_decode_kernel
#: The launchable kernel (gemm.dispatch launches and autotunes it).
gemm_decode_kernel = _DecodeLauncher(
    _gemm_decode_kernel,
    _gemm_decode_kernel.arg_names,
    {
        "EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0,
        **{
            k: (lambda args, k=k, d=d: args.get(k, d))
            for k, d in KNOB_DEFAULTS.items()
            if k not in ("W_TMA", "PRE_RES", "PERSIST")
        },
        "PRE_RES": _pre_res,
        "PERSIST": _persist,
        "W_TMA": tma_usable,
    },
)


#: SMs assumed for PERSIST grids in the interpreter (a few programs, so each walks several tiles)
INTERPRETER_SMS = 2


def grid(M: int, N: int, meta: dict) -> tuple[int, int, int]:
    """(n tiles, K pieces, m tiles); with PERSIST (after the launcher's heuristics) at most PERSIST programs
    per SM along n. K pieces beyond the last non-empty one are never launched."""
    n_tiles = triton.cdiv(N, meta["BLOCK_N"])
    if meta.get("PERSIST", 0):
        interp = interpreting() or not torch.cuda.is_available()
        sms = INTERPRETER_SMS if interp else cuda_sm_count()
        n_tiles = min(n_tiles, int(meta["PERSIST"]) * sms)
    return (n_tiles, meta["SPLIT_K"], triton.cdiv(M, meta["BLOCK_M"]))


#: device -> [partials fp32, tile counters int32]: splitk's scratch. Counters are zero between calls
#: (the kernel resets them). One per device, not per stream: a CUDA graph is captured on a side
#: stream, and a scratch first made there would put its zero-fill inside the graph (and the timing).
#: So two splitk calls must not run concurrently on two streams. Outgrown buffers are kept, never
#: freed: a CUDA graph captured earlier may still point at them.
SCRATCH: dict[str, list[torch.Tensor]] = {}
OUTGROWN: list[torch.Tensor] = []


def workspace(device: torch.device, M: int, N: int, cfgs: list[dict[str, Any]]):
    """Partials [SPLIT_K, M, N] fp32 and per-tile counters for the largest need among ``cfgs``."""
    parts = max(int(c.get("SPLIT_K", 1)) for c in cfgs) * M * N if any(c.get("SPLIT_K", 1) > 1 for c in cfgs) else 1
    tiles = max(triton.cdiv(M, int(c["BLOCK_M"])) * triton.cdiv(N, int(c["BLOCK_N"])) for c in cfgs)
    return grown_scratch(SCRATCH, OUTGROWN, device, parts, tiles)
