"""Prefill attention forward in Gluon for Hopper: FlashAttention-3's two consumer warpgroups fed by a TMA loader.

Triton 3.6 compiles ``solkit.kernels.attention``'s forward with a CTA-wide barrier in every key-loop iteration
(``bar.sync 0`` around the tiles' shared-memory reuse), so the two warpgroups of an 8-warp program run their
softmax at the same time and the tensor cores wait (the forward's measured ceiling, docs/kernels/attention.md).
Here the warps' roles are spelled out (``gl.warp_specialize``):

* one **loader** warp loads the program's two 64-row Q tiles, then streams K and V tiles by TMA into a
  ``STAGES``-deep shared-memory ring (``k_ready``/``v_ready`` mbarriers with the byte counts, ``kv_empty`` with
  one arrival per consumer);
* two **consumer** warpgroups (4 warps each) own 64 query rows each and run the online softmax over the same
  ring slots: ``S = Q K^T`` by wgmma from shared memory, the base-2 softmax with the scale folded into the
  exponent, ``O += P V`` with P from registers. Nothing synchronises the two warpgroups but the ring, so one's
  softmax can run while the other's GEMMs use the tensor cores; with ``PINGPONG`` a pair of mbarriers makes them
  take turns at issuing their GEMMs (FlashAttention-3's schedule).

Causal (top-left, square): a program (128 query rows) loads the key tiles up to its last row; a consumer whose
rows end earlier waits for and releases the tiles it does not need. Only tiles crossing a consumer's diagonal are
masked. Dense ``(B, H, S, D)`` contiguous bf16/fp16 only, ``S`` a multiple of 128, head_dim 64 or 128: the
descriptors are 2-D views ``(B * H * S, D)``, so a tile must not cross a head. Writes O and the base-2 logsumexp
(``(B, Hq, S)`` fp32, as the Triton forward saves it). FLOPs and bytes as in ``solkit.kernels.attention.prefill``.
"""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common.device import gluon_unavailable_reason

try:  # Gluon is experimental: its absence (older Triton) or a changed API only makes this path unavailable
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - depends on the installed Triton
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

LOG2E = 1.4426950408889634
BLOCK_M = 128  # query rows per program: two consumers of 64
_GL_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def unavailable_reason(device: torch.device | None = None) -> str | None:
    return gluon_unavailable_reason(_IMPORT_ERROR, device)


if _IMPORT_ERROR is None:

    @gluon.jit
    def _loader(args, STAGES: gl.constexpr):
        q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, kv_empty, q_row, kv_row, n_tiles = args
        HALF: gl.constexpr = q_desc.block_type.shape[0]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        for c in gl.static_range(2):
            mbarrier.expect(q_bar.index(c), q_desc.block_type.nbytes)
            _tma_load(q_desc, [q_row + c * HALF, 0], q_bar.index(c), q_smem.index(c))
        for j in range(n_tiles):
            s = j % STAGES
            # a fresh barrier counts as having completed the phase before phase 0: the first lap passes
            mbarrier.wait(kv_empty.index(s), ((j // STAGES) & 1) ^ 1)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            _tma_load(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(s), k_ring.index(s))
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            _tma_load(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(s), v_ring.index(s))

    @gluon.jit
    def _softmax(qk, m_i, l_i, offs_m, j, row0, qk_scale, CAUSAL: gl.constexpr, dtype: gl.constexpr,
                 HEAD_DIM: gl.constexpr):  # fmt: skip
        """One score tile into the online softmax: ``(P as the PV wgmma's A operand, the accumulator's rescale,
        m, l)``. Causal: only a tile crossing the consumer's diagonal is masked."""
        BLOCK_N: gl.constexpr = qk.shape[1]
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        if CAUSAL:  # noqa: SIM102 - a constexpr test, then a run-time one
            if (j + 1) * BLOCK_N > row0:
                offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, qk.type.layout))
                qk = gl.where(gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0), qk, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(qk, axis=1) * qk_scale)
        p = gl.exp2(qk * qk_scale - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, axis=1)
        alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        return gl.convert_layout(p.to(dtype), p_layout), alpha_o, m_new, l_i

    @gluon.jit
    def _loop_plain(q, k_ring, v_ring, k_ready, v_ready, kv_empty, turn, acc, m_i, l_i, zero_s, offs_m, row0, n_mine,
                    qk_scale, C: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):  # fmt: skip
        """Each tile: ``S = Q K^T``, wait, softmax, rescale, ``O += P V``, wait, release the slot."""
        STAGES: gl.constexpr = k_ring.shape[0]
        for j in range(n_mine):
            s = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_ready.index(s), phase)
            if PINGPONG:  # take turns issuing the GEMMs: consumer 0 first
                mbarrier.wait(turn.index(C), (j & 1) ^ (1 - C))
            qk = warpgroup_mma(q, k_ring.index(s).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(num_outstanding=0, deps=(qk,))
            if PINGPONG:
                mbarrier.arrive(turn.index(1 - C))
            p16, alpha_o, m_i, l_i = _softmax(qk, m_i, l_i, offs_m, j, row0, qk_scale, CAUSAL, q.dtype,
                                              acc.shape[1])  # fmt: skip
            acc = acc * alpha_o
            mbarrier.wait(v_ready.index(s), phase)
            acc = warpgroup_mma(p16, v_ring.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            mbarrier.arrive(kv_empty.index(s))
        return acc, m_i, l_i

    @gluon.jit
    def _loop_intra(q, k_ring, v_ring, k_ready, v_ready, kv_empty, acc, m_i, l_i, zero_s, offs_m, row0, n_mine,
                    qk_scale, CAUSAL: gl.constexpr):  # fmt: skip
        """FlashAttention-3's intra-warpgroup overlap: tile j+1's ``Q K^T`` is issued before tile j's softmax, and
        tile j's ``P V`` stays in flight through tile j+1's softmax (waited for just before the rescale). Three
        slots are held at once (j-1 until its P V retires, j, j+1), so the ring needs ``STAGES >= 3``."""
        STAGES: gl.constexpr = k_ring.shape[0]
        mbarrier.wait(k_ready.index(0), 0)
        qk = warpgroup_mma(q, k_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        qk = warpgroup_mma_wait(num_outstanding=0, deps=(qk,))
        for j in range(n_mine - 1):
            s = j % STAGES
            s1 = (j + 1) % STAGES
            mbarrier.wait(k_ready.index(s1), ((j + 1) // STAGES) & 1)
            qk_next = warpgroup_mma(q, k_ring.index(s1).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            p16, alpha_o, m_i, l_i = _softmax(qk, m_i, l_i, offs_m, j, row0, qk_scale, CAUSAL, q.dtype,
                                              acc.shape[1])  # fmt: skip
            # pending: tile j-1's P V (older), then tile j+1's Q K^T: let the P V retire, rescale, release its slot
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            if j > 0:
                mbarrier.arrive(kv_empty.index((j - 1) % STAGES))
            acc = acc * alpha_o
            mbarrier.wait(v_ready.index(s), (j // STAGES) & 1)
            acc = warpgroup_mma(p16, v_ring.index(s), acc, is_async=True)
            # pending: tile j+1's Q K^T (older), then this P V: the scores are needed next, the P V is not (acc
            # comes back as a tensor still being written; it is read only after the next iteration's wait)
            qk, acc = warpgroup_mma_wait(num_outstanding=1, deps=(qk_next, acc))
        j = n_mine - 1
        s = j % STAGES
        p16, alpha_o, m_i, l_i = _softmax(qk, m_i, l_i, offs_m, j, row0, qk_scale, CAUSAL, q.dtype,
                                          acc.shape[1])  # fmt: skip
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if j > 0:
            mbarrier.arrive(kv_empty.index((j - 1) % STAGES))
        acc = acc * alpha_o
        mbarrier.wait(v_ready.index(s), (j // STAGES) & 1)
        acc = warpgroup_mma(p16, v_ring.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(kv_empty.index(s))
        return acc, m_i, l_i

    @gluon.jit
    def _consumer(args, C: gl.constexpr, CAUSAL: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                  INTRA: gl.constexpr):  # fmt: skip
        o_ptr, lse_ptr, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, kv_empty, turn, q_row, start_m, n_tiles, \
            qk_scale = args  # fmt: skip
        HALF: gl.constexpr = q_smem.shape[1]
        HEAD_DIM: gl.constexpr = q_smem.shape[2]
        BLOCK_N: gl.constexpr = k_ring.shape[1]
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])  # fmt: skip
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
        row0 = start_m + C * HALF
        offs_m = row0 + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
        m_i = gl.full([HALF], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([HALF], gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([HALF, HEAD_DIM], gl.float32, o_layout)
        zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, s_layout)
        n_mine = n_tiles
        if CAUSAL:
            n_mine = gl.minimum(gl.cdiv(row0 + HALF, BLOCK_N), n_tiles)
        mbarrier.wait(q_bar.index(C), 0)
        q = q_smem.index(C)
        if INTRA:
            acc, m_i, l_i = _loop_intra(q, k_ring, v_ring, k_ready, v_ready, kv_empty, acc, m_i, l_i, zero_s, offs_m,
                                        row0, n_mine, qk_scale, CAUSAL)  # fmt: skip
        else:
            acc, m_i, l_i = _loop_plain(q, k_ring, v_ring, k_ready, v_ready, kv_empty, turn, acc, m_i, l_i, zero_s,
                                        offs_m, row0, n_mine, qk_scale, C, CAUSAL, PINGPONG)  # fmt: skip
        for j in range(n_mine, n_tiles):  # tiles only the other consumer needs (causal): release them in order
            s = j % STAGES
            mbarrier.wait(k_ready.index(s), (j // STAGES) & 1)
            if PINGPONG and not INTRA:  # keep the turns in step with the other consumer's tile count
                mbarrier.wait(turn.index(C), (j & 1) ^ (1 - C))
                mbarrier.arrive(turn.index(1 - C))
            mbarrier.wait(v_ready.index(s), (j // STAGES) & 1)
            mbarrier.arrive(kv_empty.index(s))
        lse = m_i + gl.log2(l_i)
        out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
        rows = (q_row + C * HALF).to(gl.int64)
        offs_mo = gl.arange(0, HALF, layout=gl.SliceLayout(1, o_layout))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        o_ptrs = o_ptr + (rows + gl.expand_dims(offs_mo, 1)) * HEAD_DIM + gl.expand_dims(offs_d, 0)
        gl.store(o_ptrs, out.to(dtype))
        gl.store(lse_ptr + rows + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout)), lse)

    @gluon.jit
    def _attention_fwd_ws_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr, seqlen, heads_q, group, qk_scale,
                                 CAUSAL: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr,
                                 INTRA: gl.constexpr, LOADER_REGS: gl.constexpr,
                                 CONSUMER_REGS: gl.constexpr):  # fmt: skip
        HALF: gl.constexpr = q_desc.block_type.shape[0]
        HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
        dtype: gl.constexpr = q_desc.dtype
        pid_m = gl.program_id(0)
        if CAUSAL:  # the longest rows first
            pid_m = gl.num_programs(0) - 1 - pid_m
        pid_bh = gl.program_id(1)
        b = pid_bh // heads_q
        h = pid_bh % heads_q
        start_m = pid_m * (2 * HALF)
        q_row = pid_bh * seqlen + start_m
        kv_row = (b * (heads_q // group) + h // group) * seqlen
        n_tiles = seqlen // BLOCK_N
        if CAUSAL:
            n_tiles = gl.cdiv(start_m + 2 * HALF, BLOCK_N)
        q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], q_desc.layout)
        k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(q_bar.index(i), count=1)
            mbarrier.init(turn.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(kv_empty.index(i), count=2)  # one arrival per consumer
        loader_args = (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, kv_empty, q_row,
                       kv_row, n_tiles)  # fmt: skip
        consumer_args = (o_ptr, lse_ptr, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, kv_empty, turn, q_row,
                         start_m, n_tiles, qk_scale)  # fmt: skip
        gl.warp_specialize(
            [
                (_consumer, (consumer_args, 0, CAUSAL, STAGES, PINGPONG, INTRA)),
                (_consumer, (consumer_args, 1, CAUSAL, STAGES, PINGPONG, INTRA)),
                (_loader, (loader_args, STAGES)),
            ],
            [4, 1],
            [CONSUMER_REGS, LOADER_REGS],
        )


def _layout(block: list[int], dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _GL_DTYPES[dtype]))


def attention_fwd_gluon(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
                        scale: float | None = None, block_n: int = 128, stages: int = 2, pingpong: bool = False,
                        intra: bool = False, loader_regs: int = 24, consumer_regs: int = 232,
                        ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(out, lse)`` of causal or full attention, ``q`` ``(B, Hq, S, D)``, ``k``/``v`` ``(B, Hkv, S, D)``,
    contiguous bf16/fp16, ``S`` a multiple of 128 (and of ``block_n``), ``D`` 64 or 128; Hopper with Gluon."""
    reason = unavailable_reason(q.device)
    if reason:
        raise SolkitError(f"attention_fwd_gluon: {reason}")
    B, hq, S, D = q.shape
    hkv = k.shape[1]
    if q.dtype not in _GL_DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise SolkitError("attention_fwd_gluon: q, k, v must share a bf16 or fp16 dtype")
    if S % BLOCK_M or S % block_n or D not in (64, 128) or hq % hkv or k.shape != v.shape or k.shape[2] != S:
        raise SolkitError(f"attention_fwd_gluon: needs S % {BLOCK_M} == S % block_n == 0, D 64/128, GQA heads")
    if intra and stages < 3:  # tile j-1's slot (its P V in flight) and tile j's stay held while j+1 loads
        raise SolkitError("attention_fwd_gluon: intra needs stages >= 3")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    lse = torch.empty((B, hq, S), dtype=torch.float32, device=q.device)
    half = BLOCK_M // 2
    q_desc = TensorDescriptor.from_tensor(q.view(-1, D), [half, D], _layout([half, D], q.dtype))
    k_desc = TensorDescriptor.from_tensor(k.view(-1, D), [block_n, D], _layout([block_n, D], q.dtype))
    v_desc = TensorDescriptor.from_tensor(v.view(-1, D), [block_n, D], _layout([block_n, D], q.dtype))
    scale = D**-0.5 if scale is None else float(scale)
    grid = (S // BLOCK_M, B * hq)
    _attention_fwd_ws_kernel[grid](
        q_desc, k_desc, v_desc, out, lse, S, hq, hq // hkv, scale * LOG2E, CAUSAL=bool(causal), STAGES=stages,
        PINGPONG=bool(pingpong), INTRA=bool(intra), LOADER_REGS=loader_regs, CONSUMER_REGS=consumer_regs, num_warps=4,
    )  # fmt: skip
    return out, lse


def compile_sm90(*, causal: bool = True, head_dim: int = 128, block_n: int = 128, stages: int = 2,
                 pingpong: bool = False, intra: bool = False, dtype: str = "bf16"):  # fmt: skip
    """Compile for sm_90 without a GPU (to read its PTX and catch API errors before a device run)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = getattr(gl, {"bf16": "bfloat16", "fp16": "float16"}[dtype])

    def desc(block: list[int]) -> str:
        return f"tensordesc<{dtype}[{block[0]}, {block[1]}],{gl.NVMMASharedLayout.get_default_for(block, gl_dtype)!r}>"

    sig = {"q_desc": desc([BLOCK_M // 2, head_dim]), "k_desc": desc([block_n, head_dim]),
           "v_desc": desc([block_n, head_dim]), "o_ptr": f"*{dtype}", "lse_ptr": "*fp32", "seqlen": "i32",
           "heads_q": "i32", "group": "i32", "qk_scale": "fp32", "CAUSAL": "constexpr", "STAGES": "constexpr",
           "PINGPONG": "constexpr", "INTRA": "constexpr", "LOADER_REGS": "constexpr",
           "CONSUMER_REGS": "constexpr"}  # fmt: skip
    consts = {"CAUSAL": causal, "STAGES": stages, "PINGPONG": pingpong, "INTRA": intra, "LOADER_REGS": 24,
              "CONSUMER_REGS": 232}  # fmt: skip
    src = GluonASTSource(_attention_fwd_ws_kernel, sig, consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
