"""Stream-K persistent GEMM with the fused epilogue: ``y = act(x @ W.T + bias) * alpha + residual * beta``.

Why: the persistent kernel (gemm/kernels.py, ``tma_persistent``) hands whole output tiles to P = #SMs programs.
With T tiles, the last wave holds T mod P of them and the other SMs idle: 4096^3 in 128x256 tiles is
T = 512 on 132 SMs, 3.88 waves run in the time of 4 (3 % lost), 8192x4096^2 is 7.76 waves in 8.

Schedule (hybrid data-parallel + stream-K, CUTLASS's "DP + one stream-K wave"): with k_tiles =
ceil(K / BLOCK_K) iterations per tile,

* the first ``S = (T mod P) + (SK_WAVES - 1) * P`` tiles (S = 0 when T mod P = 0; S = T when T < P)
  are cut into their S * k_tiles K-iterations, and those are dealt out evenly: program p gets the
  contiguous range [p * q + min(p, r), (p + 1) * q + min(p + 1, r)) with q, r = divmod(S * k_tiles, P);
* the remaining T - S tiles (a whole number of waves) go whole, round-robin, as in the persistent kernel.

Every program therefore runs S * k_tiles / P + (T - S) / P * k_tiles iterations, +-1: no idle tail.
A range cuts at most its first and its last tile. A cut tile's pieces are fp32 partial accumulators:
each piece is stored to the workspace (slot 0 = the program's first piece, slot 1 = its last), then the
program takes a ticket from the tile's counter (CTA barrier, one gpu-scope acq_rel atomic). The program
drawing the last ticket sums the pieces in contributor order (so the sum is the same whoever finishes:
deterministic), runs the epilogue, stores y and resets the counter. Nobody waits on anybody: no
deadlock whatever the residency, and the kernel runs as well in Triton's interpreter (programs one
after another). Counters are zero between calls and the workspace needs no initialisation, so the
kernel is CUDA-graph safe; calls on one device must not run concurrently on two streams (they share
the workspace, as the splitk decode kernel's).

Bytes: as the persistent kernel, x [M, K] and W [N, K] from HBM once (L2 shares the re-reads across
tiles in GROUP_M order), the residual [M, N] read and y [M, N] written once; plus the workspace
traffic, all in L2: about 2 * S * BLOCK_M * BLOCK_N * 4 bytes written (up to two pieces per cut
tile) and as much read by the finishers. For 4096^3 in 128x256 tiles with SK_WAVES = 1, S = 116:
~30 MB through L2 (the 50 MB of H200's L2 hold it), against 96 MiB of operands from HBM.
FLOPs: 2 * M * N * K, as for any GEMM; the fix-up's adds are noise.

Measured (H200, bf16, benchmarks/results/gemm/2026-11-30_h200_oproj_sweep_0712.json): slower than the persistent
kernel at 4096^3 .. 8192^3 (by 11 % down to 1 %): the partial stores, fix-up reads and pipeline restarts
cost more than the wave tail it removes (docs/kernels/gemm.md, "Stream-K").

A lab experiment: no dispatcher reaches it; call :func:`gemm_streamk` (a config as in gemm/configs.yaml,
with the stream-K keys of :data:`STREAMK_DEFAULTS`), or :func:`compile_for` for Triton's AOT path.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.device import cuda_sm_count, interpreting, use_descriptor_scratch
from solkit.kernels.common.rows import grown_scratch
from solkit.kernels.gemm.aot import compile_kernel
from solkit.kernels.gemm.dispatch import INTERPRETER_PROGRAMS, check_operands, operands, tma_ok, torch_epilogue
from solkit.kernels.gemm.table import ACTIVATIONS, META_KEYS, m_bucket
from solkit.kernels.gemm.tiles import finish_tile, halves, prefetch_l2, tile_coords


@triton.jit
def _range_start(p, iters_per, extra):
    """First stream-K iteration of program p (programs below ``extra`` get one more iteration)."""
    return p * iters_per + tl.minimum(p, extra)


@triton.jit
def _owner(i, iters_per, extra):
    """The program whose stream-K range holds iteration i."""
    big = extra * (iters_per + 1)
    per = tl.maximum(iters_per, 1)
    return tl.where(i < big, i // (iters_per + 1), extra + (i - big) // per)


@triton.jit
def _fixed_piece(part, col, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """Columns [col, col + width) of a cut tile: the sum of every contributor's piece, in program order
    (this program's own from registers, the others' from the workspace, through L2: ``.cg``)."""
    WIDTH: tl.constexpr = part.shape[1]
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + (col + tl.arange(0, WIDTH))[None, :]
    total = tl.zeros((BLOCK_M, WIDTH), dtype=tl.float32)
    for q in range(p_first, p_last + 1):
        if q == me:
            total = total + part
        else:
            # slot 1 when q's range started before this tile (the tile is q's last piece), else 0
            slot = (_range_start(q, iters_per, extra) < tile_start).to(tl.int32)
            total = total + tl.load(ws_ptr + (q * 2 + slot) * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
    return total


@triton.jit
def _store_tile(acc, off_m, off_n, M, N, y_desc, r_desc, y_ptr, bias_ptr, res_ptr, stride_rm, alpha, beta,
                ws_ptr, tile_start, p_first, p_last, me, iters_per, extra,
                HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr, FIX: tl.constexpr,
                RES_LOADS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                EPI_SUBTILE: tl.constexpr):  # fmt: skip
    """The epilogue of one tile in EPI_SUBTILE column pieces; with FIX, each piece is first summed with
    the other contributors' partials (piece by piece: one piece of partials in registers at a time)."""
    SUB_N: tl.constexpr = BLOCK_N // EPI_SUBTILE
    PRE: tl.constexpr = HAS_RESIDUAL and RES_LOADS
    res = None
    if PRE:  # the whole residual tile in one batch of plain loads (L2-prefetched with PREFETCH_RES 4)
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        res = tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :],
                      mask=(rows < M)[:, None] & (cols < N)[None, :], other=0.0)  # fmt: skip
    if EPI_SUBTILE == 1:
        if FIX:
            acc = _fixed_piece(acc, 0, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M, BLOCK_N)
        finish_tile(acc, res, off_m, off_n, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip
    elif EPI_SUBTILE == 2:
        left, right = halves(acc, BLOCK_M, BLOCK_N)
        r_left = res
        r_right = res
        if PRE:
            r_left, r_right = halves(res, BLOCK_M, BLOCK_N)
        if FIX:
            left = _fixed_piece(left, 0, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M, BLOCK_N)
        finish_tile(left, r_left, off_m, off_n, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip
        if FIX:
            right = _fixed_piece(right, SUB_N, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M,
                                 BLOCK_N)  # fmt: skip
        finish_tile(right, r_right, off_m, off_n + SUB_N, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip
    else:  # 4
        left, right = halves(acc, BLOCK_M, BLOCK_N)
        q0, q1 = halves(left, BLOCK_M, BLOCK_N // 2)
        q2, q3 = halves(right, BLOCK_M, BLOCK_N // 2)
        r0 = res
        r1 = res
        r2 = res
        r3 = res
        if PRE:
            r_left, r_right = halves(res, BLOCK_M, BLOCK_N)
            r0, r1 = halves(r_left, BLOCK_M, BLOCK_N // 2)
            r2, r3 = halves(r_right, BLOCK_M, BLOCK_N // 2)
        if FIX:
            q0 = _fixed_piece(q0, 0, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M, BLOCK_N)
        finish_tile(q0, r0, off_m, off_n, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS, HAS_RESIDUAL,
                    ACT, PRE)  # fmt: skip
        if FIX:
            q1 = _fixed_piece(q1, SUB_N, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M, BLOCK_N)
        finish_tile(q1, r1, off_m, off_n + SUB_N, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip
        if FIX:
            q2 = _fixed_piece(q2, 2 * SUB_N, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M,
                              BLOCK_N)  # fmt: skip
        finish_tile(q2, r2, off_m, off_n + 2 * SUB_N, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip
        if FIX:
            q3 = _fixed_piece(q3, 3 * SUB_N, ws_ptr, tile_start, p_first, p_last, me, iters_per, extra, BLOCK_M,
                              BLOCK_N)  # fmt: skip
        finish_tile(q3, r3, off_m, off_n + 3 * SUB_N, N, y_desc, r_desc, y_ptr, bias_ptr, alpha, beta, HAS_BIAS,
                    HAS_RESIDUAL, ACT, PRE)  # fmt: skip


@triton.jit
def _initial_acc(res_ptr, off_m, off_n, M, N, stride_rm, scale, from_residual, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, RES_IN_ACC: tl.constexpr):  # fmt: skip
    """The accumulator a tile piece starts from: zeros, or (RES_IN_ACC, the piece holding k = 0) the
    residual tile times beta / alpha, so that the epilogue's ``acc * alpha`` adds ``residual * beta``."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if RES_IN_ACC:
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        row_end = tl.where(from_residual, M, 0)  # nothing is read for the other pieces of a tile
        ok = (rows < row_end)[:, None] & (cols < N)[None, :]
        res = tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :], mask=ok, other=0.0)
        acc = res.to(tl.float32) * scale
    return acc


@triton.jit
def _schedule(tiles, k_tiles, num_programs, SK_WAVES: tl.constexpr):
    """(stream-K tiles S, iterations per program q, programs with one more r): see the module docstring."""
    if SK_WAVES > 0:
        rem = tiles % num_programs
        sk_tiles = tl.where(rem > 0, tl.minimum(rem + (SK_WAVES - 1) * num_programs, tiles), 0)
    else:
        sk_tiles = tiles * 0
    sk_iters = sk_tiles * k_tiles
    iters_per = sk_iters // num_programs
    extra = sk_iters - iters_per * num_programs
    return sk_tiles, iters_per, extra


# Over 80 lines on purpose: one kernel body whose compile-time branches share loop-carried state (split into
# helpers, that state would cross calls the software pipeliner has to see through).
# M is not specialised (by value or divisibility): every M shares one compiled kernel per config.
@triton.jit(do_not_specialize=["M", "M_BUCKET"])
def _gemm_streamk_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr, ws_ptr, count_ptr,
    M, N, K, M_BUCKET, stride_xm, stride_wn, stride_ym, stride_rm, alpha, beta,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPI_SUBTILE: tl.constexpr, FLATTEN: tl.constexpr, SK_WAVES: tl.constexpr, PREFETCH_RES: tl.constexpr,
    PF_DIST: tl.constexpr, PROGS_PER_SM: tl.constexpr,
):  # fmt: skip
    """Stream-K ranges first (the cut tiles' fix-ups then overlap other programs' whole tiles), then the
    whole tiles. PREFETCH_RES: 0 off; 1 / 2 L2 prefetch of the residual tile (evict_normal / evict_last)
    PF_DIST k-steps before the tile's last iteration (at the piece's start if 0); 4 that prefetch, then
    the residual tile by plain loads when the epilogue starts; 5 those loads without the prefetch; 6 the
    accumulator starts as residual * beta / alpha (without activation; alpha != 0, checked by the
    launcher), so the epilogue reads no residual at all. The grid is PROGS_PER_SM programs per SM (the
    launcher's): with 2, one program's epilogue runs while the other's tensor-core loop goes on (small
    tiles only: both must fit one SM's registers and shared memory)."""
    num_programs = tl.num_programs(0)
    SUB_N: tl.constexpr = BLOCK_N // EPI_SUBTILE
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride_ym, 1], block_shape=[BLOCK_M, SUB_N])
    RES_IN_ACC: tl.constexpr = HAS_RESIDUAL and PREFETCH_RES == 6 and ACT == 0
    EPI_RES: tl.constexpr = HAS_RESIDUAL and not RES_IN_ACC  # the epilogue reads the residual
    r_desc = None
    if EPI_RES:
        r_desc = tl.make_tensor_descriptor(res_ptr, shape=[M, N], strides=[stride_rm, 1], block_shape=[BLOCK_M, SUB_N])
    L2PF: tl.constexpr = EPI_RES and (PREFETCH_RES == 1 or PREFETCH_RES == 2 or PREFETCH_RES == 4)
    EVICT_LAST: tl.constexpr = PREFETCH_RES == 2
    RES_LOADS: tl.constexpr = PREFETCH_RES == 4 or PREFETCH_RES == 5
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles = num_pid_m * num_pid_n
    pid = tl.program_id(0)
    sk_tiles, iters_per, extra = _schedule(tiles, k_tiles, num_programs, SK_WAVES)
    sk_iters = sk_tiles * k_tiles
    init_scale = beta / tl.where(alpha == 0.0, 1.0, alpha)

    # ---- stream-K: this program's range of (tile, k) iterations, cut at tile boundaries
    first = tl.minimum(_range_start(pid, iters_per, extra), sk_iters)
    last = tl.minimum(_range_start(pid + 1, iters_per, extra), sk_iters)
    cur = first
    while cur < last:
        tile = cur // k_tiles
        k0 = cur - tile * k_tiles
        k1 = tl.minimum(k_tiles, k0 + (last - cur))
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        ends_tile = k1 == k_tiles
        if PF_DIST > 0:
            pf_k = tl.where(ends_tile, tl.maximum(k1 - PF_DIST, k0), -1)
        else:
            pf_k = tl.where(ends_tile, k0, -1)
        acc = _initial_acc(res_ptr, off_m, off_n, M, N, stride_rm, init_scale, k0 == 0, BLOCK_M, BLOCK_N, RES_IN_ACC)
        for kk in range(k0, k1):
            if L2PF:  # noqa: SIM102 - compile-time test outside
                if kk == pf_k:
                    prefetch_l2(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, EVICT_LAST)
            a = x_desc.load([off_m, kk * BLOCK_K])
            b = w_desc.load([off_n, kk * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        if (k0 == 0) & ends_tile:  # a whole tile inside the range: no partials
            _store_tile(acc, off_m, off_n, M, N, y_desc, r_desc, y_ptr, bias_ptr, res_ptr, stride_rm, alpha, beta,
                        ws_ptr, 0, 0, 0, pid, iters_per, extra, HAS_BIAS, EPI_RES, ACT, False, RES_LOADS,
                        BLOCK_M, BLOCK_N, EPI_SUBTILE)  # fmt: skip
        else:
            slot = (cur != first).to(tl.int32)  # 0: the range's first piece, 1: its last
            offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(ws_ptr + (pid * 2 + slot) * (BLOCK_M * BLOCK_N) + offs, acc)
            tl.debug_barrier()  # every thread's partial is written before the ticket is drawn
            ticket = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
            tile_start = tile * k_tiles
            p_first = _owner(tile_start, iters_per, extra)
            p_last = _owner(tile_start + k_tiles - 1, iters_per, extra)
            if ticket == p_last - p_first:  # the last piece to arrive: sum, epilogue, reset the counter
                _store_tile(acc, off_m, off_n, M, N, y_desc, r_desc, y_ptr, bias_ptr, res_ptr, stride_rm, alpha,
                            beta, ws_ptr, tile_start, p_first, p_last, pid, iters_per, extra, HAS_BIAS,
                            EPI_RES, ACT, True, RES_LOADS, BLOCK_M, BLOCK_N, EPI_SUBTILE)  # fmt: skip
                tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")
        cur += k1 - k0

    # ---- data-parallel: whole tiles, round-robin (a whole number of waves)
    dp_first = sk_tiles + pid
    # the epilogue keeps its own tile counter: sharing one value between the pipelined loads and the
    # epilogue stops the flattened pipeline from overlapping them
    tile_epi = dp_first - num_programs
    for tile in tl.range(dp_first, tiles, num_programs, flatten=FLATTEN):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if L2PF and PF_DIST == 0:
            prefetch_l2(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, EVICT_LAST)
        pf_k = tl.maximum(k_tiles - PF_DIST, 0)
        acc = _initial_acc(res_ptr, off_m, off_n, M, N, stride_rm, init_scale, tile >= 0, BLOCK_M, BLOCK_N, RES_IN_ACC)
        for kk in range(k_tiles):
            if L2PF and PF_DIST > 0:  # noqa: SIM102 - compile-time test outside
                if kk == pf_k:
                    prefetch_l2(res_ptr, off_m, off_n, M, N, stride_rm, BLOCK_M, BLOCK_N, EVICT_LAST)
            a = x_desc.load([off_m, kk * BLOCK_K])
            b = w_desc.load([off_n, kk * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        tile_epi += num_programs
        pid_m, pid_n = tile_coords(tile_epi, num_pid_m, num_pid_n, GROUP_M)
        _store_tile(acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, y_desc, r_desc, y_ptr, bias_ptr, res_ptr, stride_rm,
                    alpha, beta, ws_ptr, 0, 0, 0, pid, iters_per, extra, HAS_BIAS, EPI_RES, ACT, False,
                    RES_LOADS, BLOCK_M, BLOCK_N, EPI_SUBTILE)  # fmt: skip


#: The JIT function (its underscored name is the kernel name profilers and Triton's caches see).
gemm_streamk_kernel = _gemm_streamk_kernel

#: streamk keys a config may leave out.
STREAMK_DEFAULTS = {
    "EPI_SUBTILE": 1,
    "FLATTEN": True,
    "SK_WAVES": 1,
    "PREFETCH_RES": 0,
    "PF_DIST": 0,
    "PROGS_PER_SM": 1,
}
#: PREFETCH_RES in Triton's interpreter, which runs no inline PTX (the L2 prefetch): the same loads without it.
INTERPRETER_PREFETCH = {0: 0, 1: 0, 2: 0, 4: 5, 5: 5, 6: 6}


def schedule(M: int, N: int, K: int, cfg: dict[str, Any], programs: int) -> dict[str, int]:
    """The kernel's schedule on the host (for reports and tests): tiles, stream-K tiles, iterations."""
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    k_tiles = triton.cdiv(K, cfg["BLOCK_K"])
    waves = int(cfg.get("SK_WAVES", STREAMK_DEFAULTS["SK_WAVES"]))
    rem = tiles % programs
    sk_tiles = min(rem + (waves - 1) * programs, tiles) if waves > 0 and rem > 0 else 0
    iters_per, extra = divmod(sk_tiles * k_tiles, programs)
    return {"tiles": tiles, "k_tiles": k_tiles, "sk_tiles": sk_tiles, "iters_per": iters_per, "extra": extra}


#: device -> [partials fp32 [programs, 2, BLOCK_M * BLOCK_N], tile counters int32]. Counters are zero
#: between calls (the finishing program resets its tile's). One per device, not per stream: a CUDA graph
#: is captured on a side stream, and a scratch first made there would put its zero-fill inside the
#: graph. Outgrown buffers are kept, never freed: a CUDA graph captured earlier may still point at them.
SCRATCH: dict[str, list[torch.Tensor]] = {}
OUTGROWN: list[torch.Tensor] = []


def programs(sms: int, cfg: dict[str, Any]) -> int:
    """The grid of a config: PROGS_PER_SM programs per SM."""
    return sms * int(cfg.get("PROGS_PER_SM", STREAMK_DEFAULTS["PROGS_PER_SM"]))


def workspace(device: torch.device, sms: int, cfgs: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Partials and counters for the largest need among ``cfgs`` (stream-K tiles < SK_WAVES * programs)."""
    floats = max(programs(sms, c) * 2 * int(c["BLOCK_M"]) * int(c["BLOCK_N"]) for c in cfgs)
    waves = [max(int(c.get("SK_WAVES", STREAMK_DEFAULTS["SK_WAVES"])), 1) for c in cfgs]
    counters = max(programs(sms, c) * w for c, w in zip(cfgs, waves))
    return grown_scratch(SCRATCH, OUTGROWN, device, floats, counters)


#: The stream-K configs of the H200 sweep (benchmarks/results/gemm/2026-11-30_h200_oproj_sweep_0712.json), as
#: overrides of the first: SK_WAVES 0 (the data-parallel half alone, a control), 1 and 2, the residual modes,
#: epilogue pieces, tile shapes and 128x128 tiles two per SM. ``DEFAULT_CONFIG`` is the first.
_SWEPT_BASE = {
    "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "EPI_SUBTILE": 2, "FLATTEN": True, "SK_WAVES": 1,
    "PREFETCH_RES": 4, "PF_DIST": 8, "num_warps": 8, "num_stages": 3,
}  # fmt: skip
_TWO_PER_SM = {"BLOCK_N": 128, "PROGS_PER_SM": 2, "num_warps": 4}
SWEPT_CONFIGS = [
    {**_SWEPT_BASE, **over}
    for over in (
        {}, {"SK_WAVES": 0}, {"SK_WAVES": 2}, {"PREFETCH_RES": 1}, {"PREFETCH_RES": 0, "PF_DIST": 0},
        {"EPI_SUBTILE": 4, "PREFETCH_RES": 1}, {"EPI_SUBTILE": 4, "PREFETCH_RES": 1, "num_stages": 4},
        {"FLATTEN": False, "PREFETCH_RES": 1}, {"GROUP_M": 16}, {"BLOCK_M": 256, "BLOCK_N": 128},
        {"PREFETCH_RES": 6, "PF_DIST": 0}, {"EPI_SUBTILE": 4, "PREFETCH_RES": 6, "PF_DIST": 0},
        {**_TWO_PER_SM, "EPI_SUBTILE": 4, "PREFETCH_RES": 1},
        {**_TWO_PER_SM, "EPI_SUBTILE": 4, "PREFETCH_RES": 6, "PF_DIST": 0},
        {**_TWO_PER_SM, "PREFETCH_RES": 1, "num_stages": 2},
    )
]  # fmt: skip
DEFAULT_CONFIG = SWEPT_CONFIGS[0]
#: Small tiles for Triton's interpreter (a few programs then cut tiles in every way at small shapes).
INTERPRETER_CONFIG = {
    "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "EPI_SUBTILE": 2, "num_warps": 4, "num_stages": 1,
}  # fmt: skip


def to_config(cfg: dict[str, Any]) -> triton.Config:
    """A config dict as a triton.Config, the keys it leaves out from STREAMK_DEFAULTS (the interpreter runs no
    inline PTX: its PREFETCH_RES without the L2 prefetch)."""
    params = {**STREAMK_DEFAULTS, **{k: v for k, v in cfg.items() if k not in META_KEYS}}
    if interpreting():
        params["PREFETCH_RES"] = INTERPRETER_PREFETCH[params["PREFETCH_RES"]]
    return triton.Config(params, num_warps=int(cfg.get("num_warps", 4)), num_stages=int(cfg.get("num_stages", 3)))


def gemm_streamk(x, weight, bias=None, residual=None, *, alpha=1.0, beta=1.0, activation="none", config=None,
                 out=None) -> torch.Tensor:  # fmt: skip
    """``act(x @ weight.T + bias) * alpha + residual * beta`` by the stream-K kernel (operands as
    ``solkit.kernels.gemm``'s, TMA-aligned). ``config``: :data:`DEFAULT_CONFIG` on a GPU, else
    :data:`INTERPRETER_CONFIG`."""
    check_operands(x, weight, bias, residual, activation)
    lead, N = x.shape[:-1], weight.shape[0]
    x2, w, r2, y = operands(x, weight, residual, out)
    M, K = x2.shape
    if M == 0 or N == 0:
        return y.reshape(*lead, N)
    if K == 0:  # no products: the epilogue on a zero accumulator, in torch
        z = torch.zeros((M, N), dtype=torch.float32, device=x.device)
        return y.copy_(torch_epilogue(z, bias, r2, alpha, beta, activation)).reshape(*lead, N)
    if config is None:
        config = DEFAULT_CONFIG if x.device.type == "cuda" else INTERPRETER_CONFIG
    if not tma_ok(*[t for t in (x2, w, y, r2) if t is not None]):
        raise SolkitError("gemm_streamk: the tensors are not TMA-aligned")
    if alpha == 0.0 and r2 is not None:
        # PREFETCH_RES 6 starts the accumulator at residual * beta / alpha: alpha = 0 goes without it
        z = gemm_streamk(x2, w, bias, alpha=0.0, activation=activation, config=config)
        y.copy_(z.float() + r2.float() * beta)
        return y.reshape(*lead, N)
    use_descriptor_scratch()
    # the interpreter: a few programs, so each walks several tiles as on a GPU
    sms = cuda_sm_count(x2.device) if x2.device.type == "cuda" else INTERPRETER_PROGRAMS
    tc = to_config(config)
    ws, counters = workspace(x2.device, sms, [tc.kwargs])
    grid = (programs(sms, tc.kwargs),)  # the kernel's schedule is for exactly this grid
    gemm_streamk_kernel[grid](
        x2, w, y, bias, r2, ws, counters, M, N, K, m_bucket(M), x2.stride(0), w.stride(0), y.stride(0),
        r2.stride(0) if r2 is not None else 0, float(alpha), float(beta),
        HAS_BIAS=bias is not None, HAS_RESIDUAL=r2 is not None, ACT=ACTIVATIONS[activation],
        **tc.kwargs, num_warps=tc.num_warps, num_stages=tc.num_stages,
    )  # fmt: skip
    return y.reshape(*lead, N)


def compile_for(arch: int, config: dict[str, Any], **kw):
    """The stream-K kernel compiled for ``sm_<arch>`` without a GPU (``solkit.kernels.gemm.aot.compile_kernel``;
    ``kw``: dtype, has_bias, has_residual, activation)."""
    return compile_kernel(arch, gemm_streamk_kernel, to_config(config), extra_sig={"ws_ptr": "*fp32",
                          "count_ptr": "*i32"}, **kw)  # fmt: skip
