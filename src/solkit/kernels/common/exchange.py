"""Pieces shared by the split-row kernels (cross-entropy, softmax): 16-bit pairs, chunk statistics, L2 prefetch,
the tagged-word slots and the launch geometry of a grid whose programs wait for each other.

Why here. A split-row kernel cuts each row into ``SPLIT`` chunks held in the registers of ``SPLIT`` resident
programs that exchange per-chunk statistics (:mod:`solkit.kernels.common.spin`) so the row is read once. The
cross-entropy and softmax kernels share the arithmetic of a chunk (16-bit values read as int32 pairs, base-2
exponentials), the bulk L2 prefetch that keeps DRAM busy without holding registers, and the launch rules (as few
chunks as the block allows; a grid no larger than what is resident at once, or the exchange would deadlock).

Math: ``L = log2 e``; a chunk's ``(m_c, s_c)`` is its max and ``sum 2^((z - m_c) L)``; ``m_ref`` is ``m_c``, or 0 for
a chunk of padding only (-inf), so no ``-inf - -inf`` appears.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels.common.capability import DeviceCaps, Needs, unmet
from solkit.kernels.common.spin import spin_until_tagged, untag

L2E = tl.constexpr(1.4426950408889634)  # log2(e): exponentials in base 2 (one MUFU.EX2 each)
LN2 = tl.constexpr(0.6931471805599453)

#: The inline PTX of the 16-bit pair arithmetic these kernels run on a GPU (``cvt.rn.bf16x2.f32`` /
#: ``cvt.rn.f16x2.f32`` in :func:`pack`, ``fma.rn.bf16x2`` in pass 2): sm_80 and later (PTX ISA).
PAIR_PTX_CC = (8, 0)
#: :func:`l2_prefetch` (``cp.async.bulk.prefetch.L2``): sm_90 and later. A path that uses it drops the prefetch on
#: a device without it (``PF = 0``: the same kernel, its loads not ahead in L2); it does not decline.
BULK_PREFETCH = Needs(min_cc=90, note="cp.async.bulk.prefetch.L2")
#: Registers of the SM the tuned settings were measured on (sm_90): the budget a tuned ``per_sm`` implies.
TUNED_REGS_PER_SM = 65536


@triton.jit
def fast_log2(v, FAST: tl.constexpr):
    """``log2 v``; ``FAST``: one ``lg2.approx`` (MUFU.LG2, relative error ~2^-22, GPU only) instead of the
    ~25-instruction precise log2."""
    if FAST:
        return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [v], dtype=tl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    return tl.log2(v)


@triton.jit
def unpack(w, IS_BF16: tl.constexpr):
    """Two 16-bit values packed in an int32 word (little-endian: the even column in the low half) -> fp32."""
    if IS_BF16:
        lo = (w << 16).to(tl.float32, bitcast=True)
        hi = (w & -65536).to(tl.float32, bitcast=True)
    else:
        lo = (w & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (w >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def pack(lo, hi, IS_BF16: tl.constexpr, ASM: tl.constexpr):
    """fp32 pairs -> one int32 word of two 16-bit values; with ``ASM`` one ``cvt.rn.{bf16,f16}x2.f32`` per
    pair (F2FP, full rate) instead of two single conversions on the quarter-rate pipe (the MUFU's)."""
    if ASM:
        cvt: tl.constexpr = "cvt.rn.bf16x2.f32 $0, $1, $2;" if IS_BF16 else "cvt.rn.f16x2.f32 $0, $1, $2;"
        return tl.inline_asm_elementwise(cvt, "=r,f,f", [hi, lo], dtype=tl.int32, is_pure=True, pack=1)
    dt: tl.constexpr = tl.bfloat16 if IS_BF16 else tl.float16
    lo_bits = lo.to(dt).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return lo_bits | (hi.to(dt).to(tl.int16, bitcast=True).to(tl.int32) << 16)


@triton.jit
def pair_sums(w, w_mask, IS_BF16: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """Pass 1 over a packed chunk: (max, sum of 2^((z - m_ref) L), sum z)."""
    lo, hi = unpack(w, IS_BF16)
    m_c = tl.max(tl.maximum(lo, hi), axis=0)  # one block reduction for both halves
    m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
    s_c = tl.sum(tl.exp2(lo * L2E - m_ref * L2E) + tl.exp2(hi * L2E - m_ref * L2E), axis=0)
    if HAS_SMOOTHING:
        sz = tl.sum(tl.where(w_mask, lo + hi, 0.0), axis=0)
    else:
        sz = 0.0
    return m_c, s_c, sz


@triton.jit
def pass1_packed(w, w_mask, IS_BF16: tl.constexpr, HAS_SMOOTHING: tl.constexpr, E_BF16: tl.constexpr,
                 ASM: tl.constexpr):  # fmt: skip
    """(max, m_ref, sum of e, sum z, e packed as bf16x2 / f16x2) of a chunk of packed 16-bit values: pass 1 that
    keeps its exponentials ``e = 2^((z - m_ref) L) <= 1`` for pass 2 (one exponential per element)."""
    lo, hi = unpack(w, IS_BF16)
    m_c = tl.max(tl.maximum(lo, hi), axis=0)  # one block reduction for both halves
    m_ref = tl.where(m_c == -float("inf"), 0.0, m_c)
    e_lo = tl.exp2(lo * L2E - m_ref * L2E)
    e_hi = tl.exp2(hi * L2E - m_ref * L2E)
    s_c = tl.sum(e_lo + e_hi, axis=0)
    if HAS_SMOOTHING:
        sz = tl.sum(tl.where(w_mask, lo + hi, 0.0), axis=0)
    else:
        sz = 0.0
    return m_c, m_ref, s_c, sz, pack(e_lo, e_hi, E_BF16, ASM)


@triton.jit
def pass2_packed(e, m_ref, lse, p_scale, uniform, IS_BF16: tl.constexpr, PASS2_BF16: tl.constexpr,
                 ASM: tl.constexpr):  # fmt: skip
    """Packed output words ``e * C - u`` of a chunk from its packed exponentials, ``C = 2^((m_ref - lse) L) *
    p_scale``: with ``PASS2_BF16`` (bf16 pairs) one ``fma.rn.bf16x2`` per pair, else unpacked to fp32, one FFMA,
    packed to the output dtype."""
    c = tl.exp2(m_ref * L2E - lse * L2E) * p_scale
    if PASS2_BF16 and ASM:
        cw = tl.broadcast_to(pack(c, c, True, ASM), e.shape)
        uw = tl.broadcast_to(pack(-uniform, -uniform, True, ASM), e.shape)
        return tl.inline_asm_elementwise("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r", [e, cw, uw], dtype=tl.int32,
                                         is_pure=True, pack=1)  # fmt: skip
    else:
        e_lo, e_hi = unpack(e, PASS2_BF16)  # bf16 pairs here only under the interpreter (no inline asm)
        return pack(e_lo * c - uniform, e_hi * c - uniform, IS_BF16, ASM)


@triton.jit
def l2_prefetch(ptr, nbytes):
    """One TMA bulk prefetch into L2 (``cp.async.bulk.prefetch.L2``, sm_90) of ``nbytes`` (a multiple of 16,
    16-byte aligned) at ``ptr``, issued by thread 0: DRAM traffic in flight that holds no register."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def prefetch_rows(w_ptr, first, count: tl.constexpr, n_groups, n_rows, w_row_stride, wcol0, nbytes):
    """L2 prefetches of this program's chunk in rows ``first, first + G, ...`` (``count`` of them, < n_rows)."""
    for i in tl.static_range(count):
        r = first + i * n_groups
        if r < n_rows:
            l2_prefetch(w_ptr + r.to(tl.int64) * w_row_stride + wcol0, nbytes)


@triton.jit
def await_max_sum(base, j, wm, ws, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr):
    """From a first read (``wm, ws``) re-read the group's ``(max, sum)`` words of arrival ``j`` until every tag
    matches (at most ``spin_budget`` times: :func:`~solkit.kernels.common.spin.spin_until_tagged`); returns the
    row's (max M, sum of 2^((x - M) L), 1 if all arrived else 0)."""
    wm, ws, _ws, ready = spin_until_tagged(base, j, wm, ws, ws, spin_budget, SPLIT, SPLIT_P2, 2)
    ms = untag(wm)
    big = tl.max(ms, axis=0)
    return big, tl.sum(untag(ws) * tl.exp(ms - big), axis=0), ready


def bulk_prefetch_ok(caps: DeviceCaps) -> bool:
    """Whether ``caps`` has the bulk L2 prefetch (:data:`BULK_PREFETCH`)."""
    return not unmet(BULK_PREFETCH, caps)


def resident_regs(per_sm: int, num_warps: int, regs_per_sm: int | None = None) -> int:
    """Registers per thread (a multiple of 8, at most 255) that let ``per_sm`` programs of ``num_warps`` warps share
    an SM's ``regs_per_sm`` registers (:data:`TUNED_REGS_PER_SM` when not given): the ``maxnreg`` of a grid whose
    programs must all be resident at once."""
    return min(255, (regs_per_sm or TUNED_REGS_PER_SM) // (per_sm * num_warps * 32) // 8 * 8)


def per_sm_for(caps: DeviceCaps, measured: bool, per_sm: int, num_warps: int, smem_bytes: int = 0) -> int:
    """Programs per SM of a persistent grid on ``caps``: ``per_sm`` as tuned where it was measured on this
    architecture (``measured``, :func:`solkit.kernels.common.tuned.for_arch`) or where ``caps`` has no limits (the
    interpreter). Elsewhere derived, never copied: the tuned register budget per thread
    (:func:`resident_regs` on the measured part) kept, as many programs as this part's register file holds at that
    budget, and no more than its shared memory holds (``smem_bytes`` a program plus the 1 KB the driver keeps)."""
    if measured or caps.regs_per_sm is None:
        return per_sm
    budget = resident_regs(per_sm, num_warps)
    n = caps.regs_per_sm // (budget * 32 * num_warps)
    if smem_bytes and caps.smem_per_sm:
        n = min(n, caps.smem_per_sm // (smem_bytes + 1024))
    return max(1, n)


def tagged_slots(n_groups: int, split: int, words_per_chunk: int, device) -> torch.Tensor:
    """Eight slots of tagged 64-bit partials per group, zeroed (one memset per call: tags restart at 1)."""
    sp2 = max(triton.next_power_of_2(split), 2)
    return torch.zeros(8 * n_groups * words_per_chunk * sp2, dtype=torch.int64, device=device)


def chunk_layout(n_cols: int, block: int) -> tuple[int, int, int]:
    """(split, chunk_cols, block) for a row of ``n_cols``: as few chunks of at most ``block`` columns as
    possible, chunk widths a multiple of 16 (16-byte vector loads), ``block`` shrunk to the chunk's power of 2."""
    split = triton.cdiv(n_cols, block)
    chunk_cols = triton.cdiv(triton.cdiv(n_cols, split), 16) * 16
    split = triton.cdiv(n_cols, chunk_cols)  # rounding up the width can leave the last chunk empty
    return split, chunk_cols, triton.next_power_of_2(chunk_cols)


def programs_per_sm(n_regs: int, shared: int, num_warps: int, *, regs_sm: int = 65536, smem_sm: int = 228 * 1024,
                    threads_sm: int = 2048, max_blocks: int = 32) -> dict[str, int]:  # fmt: skip
    """Resident programs per SM by each limit: registers (allocated per warp in units of 256), shared
    memory (+1 KB the driver reserves per block), threads, blocks; ``min`` of the values is the answer."""
    regs_per_warp = triton.cdiv(max(n_regs, 1) * 32, 256) * 256
    return {
        "regs": regs_sm // (regs_per_warp * num_warps),
        "smem": smem_sm // (shared + 1024),
        "threads": threads_sm // (num_warps * 32),
        "blocks": max_blocks,
    }


def resident_programs(kernel, num_warps: int, device: torch.device) -> tuple[int, dict]:
    """How many programs of a compiled Triton kernel the GPU holds at once, and the facts behind it."""
    if hasattr(kernel, "_init_handles"):
        kernel._init_handles()  # loads the binary: fills n_regs / n_spills
    props = torch.cuda.get_device_properties(device)
    n_regs, shared = int(kernel.n_regs), int(kernel.metadata.shared)
    limits = programs_per_sm(
        n_regs, shared, num_warps, regs_sm=getattr(props, "regs_per_multiprocessor", 65536),
        smem_sm=getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
        threads_sm=getattr(props, "max_threads_per_multi_processor", 2048),
    )  # fmt: skip
    per_sm = min(limits.values())
    info = {"n_regs": n_regs, "n_spills": int(getattr(kernel, "n_spills", 0)), "shared": shared,
            "per_sm_limits": limits, "resident_per_sm": per_sm}  # fmt: skip
    return per_sm * props.multi_processor_count, info
