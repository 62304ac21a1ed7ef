"""Warp-specialised Hopper GEMM in Gluon: ``y = act(x @ W.T + bias) * alpha + residual * beta``.

Shapes: x [M, K], W [N, K] (nn.Linear layout), bias [N], residual [M, N], y [M, N]; bf16/fp16 operands,
fp32 accumulation. FLOPs: 2*M*N*K on the tensor cores. Bytes (the SOL count): (M*K + N*K + 2*M*N) * itemsize
with a residual ((M*K + N*K + M*N) * itemsize without), plus N * itemsize for the bias.

Why a second Hopper kernel: the Triton kernel (gemm/kernels.py, ``tma_persistent``) runs each tile's epilogue between
two tiles' MMAs, so the tensor cores idle while the residual tile enters the SM and y leaves it (3-4 % of the
cycles, docs/kernels/gemm.md "Where the residual's cost goes"). Triton 3.6's ``warp_specialize`` does not split
that loop on sm_90. Here the warps are split by hand (``gl.warp_specialize``):

* one **producer** warp walks this program's tiles (persistent grid, one program per SM, tiles in grouped
  order: GROUP_M tile-rows share W's columns in L2) and streams x and W k-slices by TMA into a STAGES-deep
  shared-memory ring, each slot guarded by a ``ready`` mbarrier (TMA byte count) and an ``empty`` one;
* CONSUMERS **consumer** partitions of CONSUMER_WARPS warps each take the program's tiles in turn (tile i goes
  to consumer i mod CONSUMERS) and run the wgmma main loop out of the ring, releasing each slot when the wgmma
  reading it has retired. With two consumers (CUTLASS's "ping-pong") one consumer's epilogue runs while the
  other's MMAs use the tensor cores (but its 128x128 tiles cost 8 % in the main loop on the H200). With one
  consumer of 8 warps ("cooperative", 128x256 tiles: the default, main loop level with cuBLAS) only the loads
  overlap the epilogue.
* the epilogue's residual tile is loaded by TMA into the consumer's own shared buffer during the tile's main
  loop (from k-step RES_K, in RES_SPLIT row chunks), so it has long arrived when the epilogue needs it; the
  epilogue adds it in registers, writes y into the same buffer and stores it by TMA (OOB rows clipped).

``gemm()`` (gemm/dispatch.py) runs this kernel through ``try_gemm`` by default on Hopper for M >= GLUON_MIN_M; H200
numbers and design notes: docs/kernels/gemm-hopper-ws.md.

TMA zero-fills out-of-range loads and clips stores, so any M works; K and N must be multiples of 16 and rows
16-byte aligned (the launcher falls back otherwise: ``supports``). Needs sm_90 and ``triton.experimental.gluon``
(Triton >= 3.6); ``available()`` says whether both are there, and everything here degrades to "not available"
on a CPU or an older Triton.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from solkit.errors import SolkitError, choices_hint
from solkit.kernels.common import tuned
from solkit.kernels.common.device import cuda_sm_count, gluon_unavailable_reason, interpreting

try:  # Gluon is experimental: its absence (older Triton) or a changed API only makes this path unavailable
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # Triton 3.6 names the TMA copies async_copy_global_to_shared / _shared_to_global; later versions async_load /
    # async_store (the old names raise there)
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    _IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - depends on the installed Triton
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

ACTIVATIONS = {"none": 0, "silu": 1, "gelu_tanh": 2}
_TORCH_TO_GL = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class GluonConfig:
    """One compiled variant. CONSUMERS x CONSUMER_WARPS warps compute; one more warp loads."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    stages: int = 3
    consumers: int = 1  # 1: one consumer for the whole tile (cooperative), 2: ping-pong (each its own tile)
    consumer_warps: int = 8
    group_m: int = 8
    # setmaxnreg budgets. Triton 3.6 raises the default partition (consumer 0) to 240 with one consumer, to 256
    # with two: per warpgroup the sum stays within the 64K-register file (240*2 + 24; 256 + 216 + 40)
    producer_regs: int = 24
    consumer_regs: int = 216
    # when the residual tile is loaded: -1 right after the previous tile's store (which then has to be waited
    # for at once, stalling every tile), k >= 0 at k-step k of the tile's own main loop
    res_k: int = 16
    # True: the residual moves from shared memory into registers before the last wgmma is waited for (64 more
    # registers per thread across the main loop's end), False: in the epilogue
    res_early: bool = False
    # the residual tile's TMA load in this many row chunks, two k-steps apart (RES_K >= 0)
    res_split: int = 1

    @property
    def name(self) -> str:
        kind = "pingpong" if self.consumers == 2 else "coop"
        tile = f"{self.block_m}x{self.block_n}x{self.block_k}"
        res = (
            f"_k{self.res_k}"
            + (f"_rs{self.res_split}" if self.res_split > 1 else "")
            + ("_e" if self.res_early else "")
        )
        return f"{kind}_{tile}_s{self.stages}_w{self.consumer_warps}_g{self.group_m}{res}"

    def smem_bytes(self, itemsize: int = 2) -> int:
        ring = self.stages * (self.block_m + self.block_n) * self.block_k * itemsize
        return ring + self.consumers * self.block_m * self.block_n * itemsize + 2 * self.stages * 8 + 64


#: Configs checked on the H200 (gemm/configs.yaml ``gluon_ws``); the first is the default, ping-pong (two consumers
#: taking turns) is kept for experiments and tests and never chosen by default.
CONFIGS: tuple[GluonConfig, ...] = tuple(GluonConfig(**c) for c in tuned.load("gemm", "gluon_ws")["configs"])
DEFAULT_CONFIG = CONFIGS[0]
PINGPONG = next(c for c in CONFIGS if c.consumers == 2)
SMEM_LIMIT = 227 * 1024


def unavailable_reason(device: torch.device | None = None) -> str | None:
    """Why this kernel cannot run on ``device`` (default: the current CUDA device), or None if it can."""
    return gluon_unavailable_reason(_IMPORT_ERROR, device, interpreter_blocks=False)


def available(device: torch.device | None = None) -> bool:
    """Gluon importable and ``device`` (default: the current one) a Hopper (sm_90) GPU."""
    return unavailable_reason(device) is None


def supports(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> bool:
    """Operands this kernel takes: 2-D, same bf16/fp16 dtype, contiguous rows, K and N multiples of 16."""
    if x.dim() != 2 or weight.dim() != 2 or x.dtype not in _TORCH_TO_GL or weight.dtype != x.dtype:
        return False
    m, k = x.shape
    n = weight.shape[0]
    if m == 0 or k % 16 or n % 16 or weight.shape[1] != k:
        return False
    tensors = [x, weight] + ([residual] if residual is not None else [])
    for t in tensors:
        if t.stride(-1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return False
    return residual is None or (residual.dtype == x.dtype and tuple(residual.shape) == (m, n))


if _IMPORT_ERROR is None:

    @gluon.jit
    def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
        # grouped order: GROUP_M consecutive tile-rows walk the same W columns while they are in L2
        group_size = GROUP_M * num_pid_n
        first_m = (tile // group_size) * GROUP_M
        rows = gl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group_size) % rows
        pid_n = (tile % group_size) // rows
        return pid_m, pid_n

    @gluon.jit
    def _load_residual(r_desc, off_m, off_n, res_bar, out_buf):
        # the tile in row chunks of r_desc's block (one chunk unless RES_SPLIT), all on one mbarrier
        SUB: gl.constexpr = r_desc.block_type.shape[0]
        mbarrier.expect(res_bar, out_buf.shape[0] // SUB * r_desc.block_type.nbytes)
        for i in gl.static_range(out_buf.shape[0] // SUB):
            _tma_load(r_desc, [off_m + i * SUB, off_n], res_bar, out_buf.slice(i * SUB, SUB))

    @gluon.jit
    def _producer(operands, GROUP_M: gl.constexpr):
        # ``operands``: the run-time values (one tuple for both partition lists: assigning a tuple to a name turns
        # its constexprs into run-time values); tile sizes and ring depth from the descriptors and the ring
        x_desc, w_desc, a_ring, b_ring, ready, empty, num_pid_m, num_pid_n, k_tiles = operands
        BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
        STAGES: gl.constexpr = a_ring.shape[0]
        start = gl.program_id(0)
        step = gl.num_programs(0)
        slot = 0
        for tile in range(start, num_pid_m * num_pid_n, step):
            pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            for kk in range(k_tiles):
                s = slot % STAGES
                # a fresh barrier counts as having completed the phase before phase 0: the first lap passes
                mbarrier.wait(empty.index(s), ((slot // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
                _tma_load(x_desc, [off_m, kk * BLOCK_K], ready.index(s), a_ring.index(s))
                _tma_load(w_desc, [off_n, kk * BLOCK_K], ready.index(s), b_ring.index(s))
                slot += 1

    # Over 80 lines on purpose: one warp-specialised partition whose ring slots, mbarrier phases and tile turn are
    # loop-carried across its whole body.
    @gluon.jit
    def _consumer(operands, out_buf, res_bar, turn, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
                  WARPS: gl.constexpr, HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ACT: gl.constexpr,
                  GROUP_M: gl.constexpr, RES_K: gl.constexpr, RES_EARLY: gl.constexpr):  # fmt: skip
        # ``operands``: the run-time values every consumer takes (one tuple for the kernel's three partition lists,
        # as the producer's); tile sizes and ring depth from the output descriptor and the ring
        y_desc, r_desc, bias_ptr, a_ring, b_ring, ready, empty, num_pid_m, num_pid_n, k_tiles, N, alpha, beta = operands
        BLOCK_M: gl.constexpr = y_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = y_desc.block_type.shape[1]
        STAGES: gl.constexpr = a_ring.shape[0]
        # wgmma: a 64-row slab per warpgroup, each warp 16 rows; with 8 warps two warpgroups split M
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_N, 16]
        )
        RES_SUB: gl.constexpr = r_desc.block_type.shape[0]
        RES_SPLIT: gl.constexpr = BLOCK_M // RES_SUB
        start = gl.program_id(0)
        step = gl.num_programs(0)
        num_tiles = num_pid_m * num_pid_n
        first = start + CONSUMER * step
        # RES_K < 0: each tile's residual is loaded right after the previous tile's store (so the first one here);
        # RES_K >= 0: at k-step RES_K of the tile's own main loop (the previous store has long finished by then)
        if HAS_RESIDUAL and RES_K < 0:  # noqa: SIM102 - constexpr tests, then a runtime one (no short-circuit)
            if first < num_tiles:
                pid_m, pid_n = _tile_coords(first, num_pid_m, num_pid_n, GROUP_M)
                _load_residual(r_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, res_bar, out_buf)
        res_phase = 0
        for tile in range(first, num_tiles, CONSUMERS * step):
            if CONSUMERS == 2:
                # Ping-pong: the main loops take turns. The ring's waits go by the parity of a slot's lap, which
                # only works for a waiter at most one lap ahead of the ring: consumer 1's first slot is k_tiles
                # slots (many laps) ahead, so it may only start waiting once consumer 0 has passed all of its
                # own slot waits (without this the second consumer runs ahead on stale phases and crashes).
                mine = (tile - first) // (CONSUMERS * step)  # this consumer's tile count so far
                mbarrier.wait(turn.index(CONSUMER), (mine & 1) ^ (1 - CONSUMER))
            # this program's slots are used in tile order, k_tiles per tile, whichever consumer reads them
            slot = ((tile - start) // step) * k_tiles
            pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            res_k = gl.minimum(k_tiles - 1, RES_K)
            acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
            for kk in range(k_tiles):
                s = slot % STAGES
                mbarrier.wait(ready.index(s), (slot // STAGES) & 1)
                acc = warpgroup_mma(a_ring.index(s), b_ring.index(s).permute((1, 0)), acc, use_acc=kk > 0,
                                    is_async=True)  # fmt: skip
                # keep one wgmma in flight: the one before it has retired, so its slot can be refilled
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                if kk > 0:
                    mbarrier.arrive(empty.index((slot - 1) % STAGES))
                if HAS_RESIDUAL and RES_K >= 0:
                    if kk == res_k:
                        tma.store_wait(pendings=0)
                        mbarrier.expect(res_bar, RES_SPLIT * r_desc.block_type.nbytes)
                    # RES_SPLIT > 1: the tile in row chunks two k-steps apart, so that no single long DRAM-bound
                    # copy holds up the x / W copies behind it
                    for i in gl.static_range(RES_SPLIT):
                        if kk == gl.minimum(res_k + 2 * i, k_tiles - 1):
                            _tma_load(
                                r_desc, [off_m + i * RES_SUB, off_n], res_bar, out_buf.slice(i * RES_SUB, RES_SUB)
                            )
                slot += 1
            if CONSUMERS == 2:
                mbarrier.arrive(turn.index(1 - CONSUMER))
            if HAS_RESIDUAL and RES_EARLY:
                # the residual from shared memory into registers while the last wgmma still runs
                mbarrier.wait(res_bar, res_phase)
                res_phase ^= 1
                res = out_buf.load(acc_layout)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            mbarrier.arrive(empty.index((slot - 1) % STAGES))

            if HAS_BIAS:
                cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
                bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
                acc = acc + gl.expand_dims(bias, 0)
            if ACT == 1:  # SiLU
                acc = acc / (1.0 + gl.exp(-acc))
            elif ACT == 2:  # GELU, tanh form: tanh(u) = 1 - 2 / (exp(2u) + 1)
                u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
                acc = 0.5 * acc * (2.0 - 2.0 / (gl.exp(2.0 * u) + 1.0))
            acc = acc * alpha
            if HAS_RESIDUAL:
                if not RES_EARLY:
                    mbarrier.wait(res_bar, res_phase)
                    res_phase ^= 1
                    res = out_buf.load(acc_layout)
                acc = acc + res.to(gl.float32) * beta
            else:  # the previous tile's store must have read the buffer
                tma.store_wait(pendings=0)
            out_buf.store(acc.to(y_desc.dtype))
            fence_async_shared()
            _tma_store(y_desc, [off_m, off_n], out_buf)
            if HAS_RESIDUAL and RES_K < 0:
                # the buffer is read by the store: wait before the next residual tile lands in it
                tma.store_wait(pendings=0)
                nxt = tile + CONSUMERS * step
                if nxt < num_tiles:
                    npid_m, npid_n = _tile_coords(nxt, num_pid_m, num_pid_n, GROUP_M)
                    _load_residual(r_desc, npid_m * BLOCK_M, npid_n * BLOCK_N, res_bar, out_buf)

    @gluon.jit
    def _gemm_ws_kernel(x_desc, w_desc, y_desc, r_desc, bias_ptr, M, N, K, alpha, beta,
                        HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ACT: gl.constexpr,
                        STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_WARPS: gl.constexpr,
                        GROUP_M: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                        RES_K: gl.constexpr, RES_EARLY: gl.constexpr):  # fmt: skip
        BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
        BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
        dtype: gl.constexpr = x_desc.dtype
        a_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        out0 = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], y_desc.layout)
        res_bar0 = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(res_bar0, count=1)
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        k_tiles = gl.cdiv(K, BLOCK_K)
        # the partitions' run-time arguments, one tuple each for all lists (constexprs cannot be held in a name)
        producer_args = (x_desc, w_desc, a_ring, b_ring, ready, empty, num_pid_m, num_pid_n, k_tiles)
        consumer_args = (y_desc, r_desc, bias_ptr, a_ring, b_ring, ready, empty, num_pid_m, num_pid_n, k_tiles, N,
                         alpha, beta)  # fmt: skip
        if CONSUMERS == 2:
            out1 = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], y_desc.layout)
            res_bar1 = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(res_bar1, count=1)
            turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            mbarrier.init(turn.index(0), count=1)
            mbarrier.init(turn.index(1), count=1)
            gl.warp_specialize(
                [
                    (_consumer, (consumer_args, out0, res_bar0, turn, 0, 2, CONSUMER_WARPS, HAS_BIAS, HAS_RESIDUAL,
                                 ACT, GROUP_M, RES_K, RES_EARLY)),
                    (_consumer, (consumer_args, out1, res_bar1, turn, 1, 2, CONSUMER_WARPS, HAS_BIAS, HAS_RESIDUAL,
                                 ACT, GROUP_M, RES_K, RES_EARLY)),
                    (_producer, (producer_args, GROUP_M)),
                ],
                [CONSUMER_WARPS, 1],
                [CONSUMER_REGS, PRODUCER_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_consumer, (consumer_args, out0, res_bar0, empty, 0, 1, CONSUMER_WARPS, HAS_BIAS, HAS_RESIDUAL,
                                 ACT, GROUP_M, RES_K, RES_EARLY)),
                    (_producer, (producer_args, GROUP_M)),
                ],
                [1],
                [PRODUCER_REGS],
            )  # fmt: skip


def _smem_layout(block: list[int], dtype: torch.dtype) -> Any:
    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _TORCH_TO_GL[dtype]))


def gemm_gluon(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    *,
    activation: str = "none",
    alpha: float = 1.0,
    beta: float = 1.0,
    config: GluonConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act(x @ weight.T + bias) * alpha + residual * beta`` by the warp-specialised Gluon kernel.

    x [M, K], weight [N, K], bias [N], residual [M, N]; the caller checks ``available()`` and ``supports``.
    """
    cfg = config or DEFAULT_CONFIG
    m, k = x.shape
    n = weight.shape[0]
    y = out if out is not None else torch.empty((m, n), device=x.device, dtype=x.dtype)
    a_block, b_block, y_block = [cfg.block_m, cfg.block_k], [cfg.block_n, cfg.block_k], [cfg.block_m, cfg.block_n]
    x_desc = TensorDescriptor.from_tensor(x, a_block, _smem_layout(a_block, x.dtype))
    w_desc = TensorDescriptor.from_tensor(weight, b_block, _smem_layout(b_block, x.dtype))
    y_layout = _smem_layout(y_block, x.dtype)
    y_desc = TensorDescriptor.from_tensor(y, y_block, y_layout)
    r_block = [cfg.block_m // cfg.res_split, cfg.block_n]
    r_desc = y_desc
    if residual is not None:
        r_desc = TensorDescriptor.from_tensor(residual, r_block, _smem_layout(r_block, x.dtype))
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    grid = (min(cuda_sm_count(x.device.index or 0), tiles),)
    _gemm_ws_kernel[grid](
        x_desc, w_desc, y_desc, r_desc, bias if bias is not None else y, m, n, k, float(alpha), float(beta),
        HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACT=ACTIVATIONS[activation],
        STAGES=cfg.stages, CONSUMERS=cfg.consumers, CONSUMER_WARPS=cfg.consumer_warps, GROUP_M=cfg.group_m,
        PRODUCER_REGS=cfg.producer_regs, CONSUMER_REGS=cfg.consumer_regs, RES_K=cfg.res_k, RES_EARLY=cfg.res_early,
        num_warps=cfg.consumer_warps,
    )  # fmt: skip
    return y


GEMM_BACKENDS = ("auto", "triton", "gluon")
#: backend "auto" sends M >= this to the Gluon kernel (its 128x256 tiles; below, the Triton kernel's autotuned
#: smaller tiles fill the GPU better)
GLUON_MIN_M = 1024


def backend_kind(backend: str | None) -> str:
    """The backend (argument, else SOLKIT_GEMM_BACKEND, else "auto"), checked against GEMM_BACKENDS."""
    kind = (backend or os.environ.get("SOLKIT_GEMM_BACKEND", "") or "auto").strip().lower()
    if kind not in GEMM_BACKENDS:
        raise SolkitError(choices_hint(kind, GEMM_BACKENDS, "backend / SOLKIT_GEMM_BACKEND"))
    return kind


def min_rows(kind: str, min_prefill_m: int) -> int:
    """The fewest rows backend ``kind`` ("auto" or "gluon") sends to this kernel."""
    return GLUON_MIN_M if kind == "auto" else min_prefill_m


def try_gemm(x2, w, bias, r2, y, *, backend: str | None, config: dict | None, activation: str, alpha: float,
             beta: float, min_prefill_m: int, allowed: bool = True) -> dict | None:  # fmt: skip
    """``gemm.dispatch.gemm``'s hook: run the call here if the backend (argument, else SOLKIT_GEMM_BACKEND,
    else "auto") allows it for this M, the device meets the path's needs (``allowed``: the capability model's
    answer; and a Hopper GPU with Gluon) and the kernel takes the operands, or if ``config`` names
    ``kernel: gluon_ws``. Returns the config that ran (for LAST_LAUNCH), or None."""
    kind = backend_kind(backend)
    forced = config is not None and config.get("kernel") == "gluon_ws"
    if (config is not None and not forced) or (kind == "triton" and not forced):
        return None
    min_m = 1 if forced else min_rows(kind, min_prefill_m)
    bias_ok = bias is None or (bias.is_contiguous() and bias.dtype == x2.dtype)
    ok = x2.is_cuda and not interpreting() and x2.shape[0] >= min_m and bias_ok
    ok = ok and (allowed or forced) and available(x2.device) and supports(x2, w, r2)
    if not ok:
        if forced:
            raise SolkitError("gemm: config asks for gluon_ws, which needs sm_90 with Gluon, bf16/fp16 operands and "
                              "K, N multiples of 16")  # fmt: skip
        return None
    cfg = DEFAULT_CONFIG
    if forced:
        cfg = GluonConfig(**{f: config[f] for f in GluonConfig.__dataclass_fields__ if f in config})
    gemm_gluon(x2, w, bias, r2, activation=activation, alpha=alpha, beta=beta, config=cfg, out=y)
    return dict(vars(cfg))


def compile_sm90(cfg: GluonConfig = DEFAULT_CONFIG, *, dtype: str = "bf16", has_bias: bool = False,
                 has_residual: bool = True, act: int = 0) -> Any:  # fmt: skip
    """Compile the kernel for sm_90 without a GPU (to read its TTGIR/PTX, and to catch API errors early)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = getattr(gl, {"bf16": "bfloat16", "fp16": "float16"}[dtype])

    def desc(block: list[int]) -> str:
        layout = gl.NVMMASharedLayout.get_default_for(block, gl_dtype)
        return f"tensordesc<{dtype}[{block[0]}, {block[1]}],{layout!r}>"

    sig = {
        "x_desc": desc([cfg.block_m, cfg.block_k]), "w_desc": desc([cfg.block_n, cfg.block_k]),
        "y_desc": desc([cfg.block_m, cfg.block_n]), "r_desc": desc([cfg.block_m // cfg.res_split, cfg.block_n]),
        "bias_ptr": f"*{dtype}", "M": "i32", "N": "i32", "K": "i32", "alpha": "fp32", "beta": "fp32",
        "HAS_BIAS": "constexpr", "HAS_RESIDUAL": "constexpr", "ACT": "constexpr", "STAGES": "constexpr",
        "CONSUMERS": "constexpr", "CONSUMER_WARPS": "constexpr", "GROUP_M": "constexpr",
        "PRODUCER_REGS": "constexpr", "CONSUMER_REGS": "constexpr", "RES_K": "constexpr", "RES_EARLY": "constexpr",
    }  # fmt: skip
    constexprs = {
        "HAS_BIAS": has_bias, "HAS_RESIDUAL": has_residual, "ACT": act, "STAGES": cfg.stages,
        "CONSUMERS": cfg.consumers, "CONSUMER_WARPS": cfg.consumer_warps, "GROUP_M": cfg.group_m,
        "PRODUCER_REGS": cfg.producer_regs, "CONSUMER_REGS": cfg.consumer_regs, "RES_K": cfg.res_k,
        "RES_EARLY": cfg.res_early,
    }  # fmt: skip
    # what the JIT specialises at run time for a 16-byte aligned bias and N, K divisible by 16
    aligned = [i for i, name in enumerate(sig) if name in ("bias_ptr", "N", "K")]
    src = GluonASTSource(_gemm_ws_kernel, sig, constexprs, attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.consumer_warps})
