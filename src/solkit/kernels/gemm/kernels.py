"""The Triton GEMM kernels with the fused epilogue (``gemm.dispatch`` picks and launches them).

* ``tma_persistent`` (Hopper, sm_90+): TMA tensor descriptors made on the device, one program per SM walking
  tiles in grouped order (GROUP_M rows of tiles share the same W columns, for L2 reuse). With ``FLATTEN`` the
  tile loop and the K loop are software-pipelined as one, so the loads of the next tile are in flight during
  this tile's epilogue. TMA zero-fills out-of-range loads and clips stores, so any M works; rows must be
  16-byte aligned. ``PREFETCH_RES`` picks when the residual tile is fetched (gemm/configs.yaml lists the modes).
* ``pointer`` (Ampere/Ada, odd strides or fp32, the CPU interpreter): plain masked ``tl.load`` blocks on a
  one-tile-per-program grid.

:data:`KERNEL_FNS` maps each kernel name of gemm/configs.yaml to what is launched, :data:`JIT_FNS` to the bare
JIT function (what ahead-of-time compilation needs).
"""

from __future__ import annotations

import triton
import triton.language as tl

from solkit.kernels.gemm.decode import gemm_decode_jit, gemm_decode_kernel
from solkit.kernels.gemm.epilogue import apply_epilogue
from solkit.kernels.gemm.tiles import finish_pieces, load_tile, prefetch_l2, tile_coords


# Over 80 lines on purpose: one kernel body whose compile-time branches share loop-carried state (split into
# helpers, that state would cross calls the software pipeliner has to see through).
# M is not specialised (by value or divisibility): every M shares one compiled kernel per config.
@triton.jit(do_not_specialize=["M", "M_BUCKET"])
def _gemm_tma_persistent_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta, num_programs,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPI_SUBTILE: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr, PREFETCH_RES: tl.constexpr,
    PF_DIST: tl.constexpr, Y_EVICT_FIRST: tl.constexpr, LD_DIST: tl.constexpr,
):  # fmt: skip
    """Persistent TMA GEMM + epilogue. Reads x, W once per tile row/column (L2 shares the rest)."""
    SUB_N: tl.constexpr = BLOCK_N // EPI_SUBTILE
    tl.static_assert(PREFETCH_RES < 9 or EPI_SUBTILE == 2, "PREFETCH_RES 9-12 load the residual in two halves")
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride_ym, 1], block_shape=[BLOCK_M, SUB_N])
    r_desc = None
    if HAS_RESIDUAL:
        r_desc = tl.make_tensor_descriptor(res_ptr, shape=[M, N], strides=[stride_rm, 1], block_shape=[BLOCK_M, SUB_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    start = tl.program_id(0)
    # The epilogue keeps its own tile counter: sharing one value between the pipelined loads and the
    # epilogue stops the flattened pipeline from overlapping them.
    tile_epi = start - num_programs
    for tile in tl.range(start, num_pid_m * num_pid_n, num_programs, flatten=FLATTEN, warp_specialize=WARP_SPEC):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        # PREFETCH_RES: 0 off, 1 L2 prefetch (evict_normal), 2 evict_last; issued PF_DIST k-steps
        # before the epilogue, or when the tile starts if PF_DIST is 0
        # 3: the residual tile into registers now, with plain loads: they are in flight during the whole
        # K loop and only waited for where the epilogue adds them (costs BLOCK_M*BLOCK_N/threads regs)
        # 5: as 3, the loads marked evict_first in L2 (the residual is read once: its lines should not
        # push out the x and W lines the next tiles re-read)
        res_pre = None
        if HAS_RESIDUAL and (PREFETCH_RES == 3 or PREFETCH_RES == 5):
            res_pre = load_tile(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, PREFETCH_RES == 5)
        # 4: L2 prefetch as 1, then the whole residual tile by plain loads when the epilogue starts (one
        # batch of loads in flight, instead of one TMA round trip per epilogue piece); 6: as 4 with the
        # loads evict_first; 7: those evict_first loads without the prefetch
        L2PF: tl.constexpr = PREFETCH_RES == 1 or PREFETCH_RES == 2 or PREFETCH_RES == 4 or PREFETCH_RES == 6
        if HAS_RESIDUAL and L2PF and PF_DIST == 0:
            prefetch_l2(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, PREFETCH_RES == 2)
        pf_k = tl.maximum(k_tiles - PF_DIST, 0)
        # 8: the L2 prefetch PF_DIST k-steps before the epilogue, then the tile into registers by plain
        # evict_first loads LD_DIST k-steps before it: the L2 round trip overlaps the last MMAs
        # 9 (EPI_SUBTILE 2): as 8 for the left half only; the right half is loaded when the epilogue starts
        # 10 (EPI_SUBTILE 2): the left half LD_DIST k-steps before the epilogue, the right half one k-step
        # later (each wait for loads is half as long, so it hides behind one k-step's MMA)
        # 11: as 10, each half by a TMA load (no register round trip through a blocked layout)
        # 12 (EPI_SUBTILE 2): the L2 prefetch PF_DIST k-steps before, then both halves by separate plain loads
        # when the epilogue starts (no early registers, no split of a whole-tile residual)
        LATE: tl.constexpr = HAS_RESIDUAL and PREFETCH_RES >= 8 and PREFETCH_RES <= 11
        HALVES: tl.constexpr = HAS_RESIDUAL and (PREFETCH_RES == 10 or PREFETCH_RES == 11)
        LATE_N: tl.constexpr = BLOCK_N if PREFETCH_RES == 8 else BLOCK_N // 2
        if LATE:
            res_pre = tl.zeros((BLOCK_M, LATE_N), dtype=res_ptr.dtype.element_ty)
        res_right = None
        if HALVES:
            res_right = tl.zeros((BLOCK_M, BLOCK_N // 2), dtype=res_ptr.dtype.element_ty)
        ld_k = tl.maximum(k_tiles - tl.maximum(LD_DIST, 1), 0)  # LD_DIST 0 would never load: 1
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(k_tiles):
            if HAS_RESIDUAL and (L2PF or PREFETCH_RES >= 8) and PF_DIST > 0:  # noqa: SIM102 - compile-time test
                if kk == pf_k:
                    prefetch_l2(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, PREFETCH_RES == 2)
            a = x_desc.load([off_m, kk * BLOCK_K])
            b = w_desc.load([off_n, kk * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
            # after the dot: the warps wait for these loads while this k-step's MMA runs
            if LATE:  # noqa: SIM102
                if kk == ld_k:
                    if PREFETCH_RES == 11:
                        res_pre = r_desc.load([off_m, off_n])
                    else:
                        res_pre = load_tile(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, LATE_N, True)
            if HALVES:  # noqa: SIM102
                if kk == tl.minimum(ld_k + 1, k_tiles - 1):
                    if PREFETCH_RES == 11:
                        res_right = r_desc.load([off_m, off_n + BLOCK_N // 2])
                    else:
                        res_right = load_tile(res_ptr, off_m, off_n + BLOCK_N // 2, M, N, stride_rm, BLOCK_M,
                                               BLOCK_N // 2, True)  # fmt: skip

        tile_epi += num_programs
        pid_m, pid_n = tile_coords(tile_epi, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if HAS_RESIDUAL and PREFETCH_RES >= 4 and PREFETCH_RES != 5 and PREFETCH_RES < 8:
            res_pre = load_tile(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, PREFETCH_RES >= 6)
        PRE: tl.constexpr = HAS_RESIDUAL and PREFETCH_RES >= 3  # no residual: nothing loaded
        # the epilogue in EPI_SUBTILE column pieces (less shared memory per piece)
        finish_pieces(acc, res_pre, res_right, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, res_ptr,
                       stride_rm, bias_ptr, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST, EPI_SUBTILE,
                       PREFETCH_RES, BLOCK_M, BLOCK_N)  # fmt: skip


@triton.jit(do_not_specialize=["M", "M_BUCKET"])
def _gemm_pointer_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """One output tile per program, masked pointer loads (K contiguous in x and W)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past M (decode: 15 of a 16-row tile when M = 1) are masked, so they cost no memory traffic;
    # out-of-range W rows read row 0 instead (only edge tiles have them, and they are never stored).
    row_ok = offs_m[:, None] < M
    rows_w = tl.where(offs_n < N, offs_n, 0)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + rows_w[:, None] * stride_wn + offs_k[None, :]
    # fp32 operands get exact fp32 products (torch's default), not tf32
    PRECISION: tl.constexpr = "ieee" if x_ptr.dtype.element_ty == tl.float32 else "tf32"
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = offs_k[None, :] < K - kk * BLOCK_K
        a = tl.load(x_ptrs, mask=row_ok & k_ok, other=0.0)
        b = tl.load(w_ptrs, mask=k_ok, other=0.0)
        acc = tl.dot(a, tl.trans(b), acc, input_precision=PRECISION)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    res = None
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
    out = apply_epilogue(acc, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)


# The JIT functions keep their underscored names: they are the kernel names profilers and Triton's caches see.
gemm_tma_persistent_kernel = _gemm_tma_persistent_kernel
gemm_pointer_kernel = _gemm_pointer_kernel

KERNEL_FNS = {
    "tma_persistent": gemm_tma_persistent_kernel,
    "pointer": gemm_pointer_kernel,
    "splitk": gemm_decode_kernel,
}
#: The bare JIT functions (splitk's launchable kernel wraps its own in triton.heuristics).
JIT_FNS = {**KERNEL_FNS, "splitk": gemm_decode_jit}
