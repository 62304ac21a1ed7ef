"""Tile helpers shared by solkit's persistent GEMM kernel (kernels.py's tma_persistent).

Tile order, column splits of an accumulator tile and the L2 prefetch of a residual tile; no kernel here.
"""

from __future__ import annotations

import triton
import triton.language as tl

from solkit.kernels.gemm.epilogue import apply_epilogue


@triton.jit
def tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M tile-rows advance together along N, so W tiles are reused from L2."""
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_rows
    pid_n = (tile % per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def finish_tile(part, res_pre, off_m, off_n, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr, PRELOADED: tl.constexpr):  # fmt: skip
    """Epilogue of one [BLOCK_M, width] piece of a tile: residual by TMA (or ``res_pre``, loaded
    earlier), math in fp32, TMA store."""
    res = res_pre
    if HAS_RESIDUAL and not PRELOADED:
        res = r_desc.load([off_m, off_n])
    offs_n = off_n + tl.arange(0, part.shape[1])
    out = apply_epilogue(part, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
    y_desc.store([off_m, off_n], out.to(y_ptr.dtype.element_ty))


@triton.jit
def finish_tile_plain(part, res_pre, off_m, off_n, M, N, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                      HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
                      PRELOADED: tl.constexpr):  # fmt: skip
    """As finish_tile, but y goes out by plain masked stores marked evict_first in L2 (an output no later
    tile reads: its dirty lines should not push out the x and W lines the next tiles re-read)."""
    res = res_pre
    if HAS_RESIDUAL and not PRELOADED:
        res = r_desc.load([off_m, off_n])
    offs_n = off_n + tl.arange(0, part.shape[1])
    out = apply_epilogue(part, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT)
    rows = off_m + tl.arange(0, part.shape[0])
    mask = (rows < M)[:, None] & (offs_n < N)[None, :]
    ptrs = y_ptr + rows[:, None] * stride_ym + offs_n[None, :]
    tl.store(ptrs, out.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")


@triton.jit
def finish_piece(part, res_pre, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                 HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr, PRE: tl.constexpr,
                 Y_EVICT_FIRST: tl.constexpr):  # fmt: skip
    """One epilogue piece: y by TMA store (finish_tile), or (Y_EVICT_FIRST) by plain evict_first stores."""
    if Y_EVICT_FIRST:
        finish_tile_plain(part, res_pre, off_m, off_n, M, N, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                          HAS_BIAS, HAS_RESIDUAL, ACT, PRE)  # fmt: skip
    else:
        finish_tile(part, res_pre, off_m, off_n, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip


@triton.jit
def finish_pieces(acc, res_pre, res_right, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, res_ptr, stride_rm,
                  bias_ptr, alpha, beta, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
                  PRE: tl.constexpr, Y_EVICT_FIRST: tl.constexpr, EPI_SUBTILE: tl.constexpr,
                  PREFETCH_RES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """The epilogue of a [BLOCK_M, BLOCK_N] accumulator tile in EPI_SUBTILE column pieces (finish_piece
    each). ``res_pre``: the residual tile loaded earlier (PRE), or its left half with ``res_right`` its
    right half (PREFETCH_RES 9-11; 9 loads the right half here, 12 both halves)."""
    SUB_N: tl.constexpr = BLOCK_N // EPI_SUBTILE
    # The epilogue in EPI_SUBTILE column pieces: each needs a residual and an output buffer in
    # shared memory, so smaller pieces leave more of it to the K pipeline.
    if EPI_SUBTILE == 1:
        finish_piece(acc, res_pre, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                     HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
    else:
        left, right = halves(acc, BLOCK_M, BLOCK_N)
        r_left = res_pre
        r_right = res_pre
        if PRE and PREFETCH_RES == 12:
            r_left = load_tile(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, SUB_N, True)
        if PRE and (PREFETCH_RES == 9 or PREFETCH_RES == 12):
            r_right = load_tile(res_ptr, off_m, off_n + SUB_N, M, N, stride_rm, BLOCK_M, SUB_N, True)
        elif PRE and PREFETCH_RES >= 10:
            r_right = res_right
        elif PRE:
            r_left, r_right = halves(res_pre, BLOCK_M, BLOCK_N)
        if EPI_SUBTILE == 2:
            finish_piece(left, r_left, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                         HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
            finish_piece(right, r_right, off_m, off_n + SUB_N, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha,
                         beta, HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
        else:  # 4
            q0, q1 = halves(left, BLOCK_M, BLOCK_N // 2)
            q2, q3 = halves(right, BLOCK_M, BLOCK_N // 2)
            r0 = res_pre
            r1 = res_pre
            r2 = res_pre
            r3 = res_pre
            if PRE:
                r0, r1 = halves(r_left, BLOCK_M, BLOCK_N // 2)
                r2, r3 = halves(r_right, BLOCK_M, BLOCK_N // 2)
            finish_piece(q0, r0, off_m, off_n, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                         HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
            finish_piece(q1, r1, off_m, off_n + SUB_N, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha, beta,
                         HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
            finish_piece(q2, r2, off_m, off_n + 2 * SUB_N, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha,
                         beta, HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip
            finish_piece(q3, r3, off_m, off_n + 3 * SUB_N, M, N, y_desc, r_desc, y_ptr, stride_ym, bias_ptr, alpha,
                         beta, HAS_BIAS, HAS_RESIDUAL, ACT, PRE, Y_EVICT_FIRST)  # fmt: skip


@triton.jit
def load_tile(ptr, off_m, off_n, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              EVICT_FIRST: tl.constexpr):  # fmt: skip
    """A [BLOCK_M, BLOCK_N] tile by plain masked loads (zeros outside [M, N]); EVICT_FIRST marks its L2
    lines first to go (data read once)."""
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    ptrs = ptr + rows[:, None] * stride_m + cols[None, :]
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    if EVICT_FIRST:
        return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def halves(acc, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    """[BLOCK_M, WIDTH] -> its left and right [BLOCK_M, WIDTH/2] column halves."""
    return tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, WIDTH // 2)), (0, 2, 1)))


@triton.jit
def prefetch_l2(ptr, off_m, off_n, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                EVICT_LAST: tl.constexpr):  # fmt: skip
    """Ask L2 for a [BLOCK_M, BLOCK_N] tile, one prefetch per 128-byte line.

    Persistent tiles run in lock-step, so without it every SM reads its residual tile from HBM at the
    same moment, in the epilogue, while its tensor cores idle: a bandwidth burst once per tile. The
    prefetch spreads that read over the main loop, which leaves HBM mostly idle.
    """
    LINE: tl.constexpr = 1024 // ptr.dtype.element_ty.primitive_bitwidth  # elements per 128 bytes
    rows = tl.minimum(off_m + tl.arange(0, BLOCK_M), M - 1)
    cols = tl.minimum(off_n + tl.arange(0, BLOCK_N // LINE) * LINE, N - 1)
    lines = ptr + rows[:, None] * stride_m + cols[None, :]
    if EVICT_LAST:
        tl.inline_asm_elementwise(
            "prefetch.global.L2::evict_last [$1];\n mov.u32 $0, 0;",
            "=r,l",
            [lines],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1];\n mov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32, is_pure=False, pack=1
        )
