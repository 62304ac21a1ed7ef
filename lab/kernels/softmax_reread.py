"""Lab: row softmax forward for vocabulary-wide 16-bit rows, the grouped exchange with pass 2 re-reading its chunk
from L2 (never dispatched; run it through :func:`softmax_forward_reread`).

Layout and exchange as :mod:`solkit.kernels.softmax.tma`: the row of ``N`` columns is viewed as ``[N / 256, 128]``
int32 words (two 16-bit values each), a program owns one chunk of ``BR`` 128-word blocks (the last chunk of a row
may be short: its missing blocks are masked), ``G`` groups of ``SPLIT`` resident programs walk rows ``g, g + G,
...`` and exchange per-chunk statistics through tagged words (:mod:`solkit.kernels.common.spin`). Math (fp32, base 2,
``L = log2 e``), chunk ``c`` of row ``x``:

* pass 1: ``m_c = max x``, ``s_c = sum 2^((x - m_c) L)``; publish ``(m_c, s_c)`` as arrival ``j``;
* exchange: ``M = max m_i``, ``S = sum_i s_i 2^((m_i - M) L)``;
* pass 2, ``K`` (``SKEW``) arrivals later: ``y = 2^(x L - lse_2)``, ``lse_2 = M L + log2 S``, from the chunk
  **re-read** (not from exponentials held in registers): it was read ``K G`` rows earlier (``K x G x 2N`` bytes ago
  for the whole GPU, 8-25 MB at 128256 columns), so the re-read hits L2.

What it changes against the register-held form: no row waits in registers across the exchange, so the registers
(and shared memory) go to bytes in flight, and pass 2 runs on a row whose partners finished ``K`` rows ago (the
wait is almost never a spin). The cost is a second exponential per element (MUFU) and twice the L2 -> SM reads.
Loads: pass 1 through a TMA descriptor (``TMA1``: pipelined by Triton, ``STAGES - 1`` chunks in flight in shared
memory) or plain loads; the re-read likewise (``TMA2``). ``EV1`` / ``EV2``: eviction policy of the first read /
the re-read (0 default, 1 ``evict_last``, 2 ``evict_first``; plain loads only); stores are streaming (``.cs``),
or TMA bulk stores from shared memory (``TST``).
``PF`` > 0: the chunk of the row ``STAGES - 1 + PF`` rows ahead is bulk-prefetched into L2.

Measured on the H200: slower than the register-held TMA forward at every shape and option (docs/kernels/norms.md,
"Wide softmax, session 7"), because the L2, not DRAM or the registers, is the binding unit there and the re-read
adds one L2 read per element.

Bytes per call, ``M x N`` of ``e`` bytes: DRAM read ``M N e``, write ``M N e`` (the re-read is an L2 hit; the
partials, ``16 SPLIT`` bytes per row, stay in L2). Slots: a program publishes arrival ``j`` while a partner may
still read arrival ``j - 2K - 1``, so eight slots hold a skew up to 3.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.device import interpreting
from solkit.kernels.common.exchange import L2E, fast_log2, pack, prefetch_rows, unpack
from solkit.kernels.softmax.tma import launch_grouped, publish_stats, row_stats, tma_pass1, word_meta

#: Launch defaults: 128-word blocks per chunk (16: 4096 columns), warps, programs per SM, pipeline stages, skew,
#: TMA for pass 1 / the re-read, eviction policies, L2 prefetch rows.
REREAD_CONFIG = {"blocks": 16, "num_warps": 4, "per_sm": 4, "stages": 3, "skew": 1, "tma1": 1, "tma2": 1, "ev1": 0,
                 "ev2": 0, "l2_prefetch": 0, "tstore": 0, "word1": 0, "backoff": 0}  # fmt: skip


@triton.jit
def _load_chunk(desc, xu_ptr, row, n_rows, x_stride, b0, u_offs, u_mask, PAD, BR: tl.constexpr,
                VIA_TMA: tl.constexpr, EVICT: tl.constexpr):  # fmt: skip
    """The program's chunk of ``row`` as ``[BR, 128]`` words; ``PAD`` (-inf pairs) past the row's end; rows past
    the last read as padding (plain) or zeros (TMA: never stored)."""
    if VIA_TMA:
        return tl.where(u_mask, tl.reshape(desc.load([row, b0, 0]), [BR, 128]), PAD)
    else:
        ptrs = xu_ptr + tl.cast(row, tl.int64) * x_stride + u_offs
        mask = u_mask & ((u_offs * 0 + row) < n_rows)
        if EVICT == 1:
            return tl.load(ptrs, mask=mask, other=PAD, eviction_policy="evict_last")
        elif EVICT == 2:
            return tl.load(ptrs, mask=mask, other=PAD, eviction_policy="evict_first")
        else:
            return tl.load(ptrs, mask=mask, other=PAD)


@triton.jit
def _pass1(desc, xu_ptr, row, j, n_rows, x_stride, b0, u_offs, u_mask, gbase, slot_stride, chunk, PAD,
           BR: tl.constexpr, SPLIT_P2: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr, TMA1: tl.constexpr,
           EV1: tl.constexpr, WORD1: tl.constexpr):  # fmt: skip
    """Read the chunk of ``row`` and publish its ``(max, sum)`` as arrival ``j`` (the exponentials are dropped)."""
    w = _load_chunk(desc, xu_ptr, row, n_rows, x_stride, b0, u_offs, u_mask, PAD, BR, TMA1, EV1)
    m_c, _m_ref, s_c, _e = tma_pass1(w, False, IS_BF16, ASM)
    publish_stats(gbase + (j & 7) * slot_stride, chunk, j, m_c, s_c, SPLIT_P2, WORD1)


@triton.jit
def _pass2(desc, ydesc, x_ptr, xu_ptr, yu_ptr, row, j, n_rows, x_stride, y_stride, n_cols, b0, u_offs, u_mask, gbase,
           slot_stride, spin_budget, PAD, BR: tl.constexpr, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
           IS_BF16: tl.constexpr, ASM: tl.constexpr, FALLBACK: tl.constexpr, TMA2: tl.constexpr,
           EV2: tl.constexpr, TST: tl.constexpr, WORD1: tl.constexpr, BACKOFF: tl.constexpr):  # fmt: skip
    """Re-read the chunk of ``row`` (issued before the wait: its latency overlaps it), wait for arrival ``j``'s
    statistics, store ``y = 2^(x L - lse_2)`` (streaming); returns the spin budget left."""
    w = _load_chunk(desc, xu_ptr, row, n_rows, x_stride, b0, u_offs, u_mask, PAD, BR, TMA2, EV2)
    big, total, spin_budget = row_stats(x_ptr, tl.minimum(row, n_rows - 1), 2 * x_stride, n_cols,
                                         gbase + (j & 7) * slot_stride, j, spin_budget, SPLIT, SPLIT_P2, ASM,
                                         FALLBACK, WORD1, BACKOFF)  # fmt: skip
    lse2 = big * L2E + fast_log2(total, ASM)
    lo, hi = unpack(w, IS_BF16)
    y = pack(tl.exp2(lo * L2E - lse2), tl.exp2(hi * L2E - lse2), IS_BF16, ASM)
    if TST:  # a TMA bulk store from shared memory (blocks and rows out of bounds are clipped by the descriptor)
        ydesc.store([row, b0, 0], tl.reshape(y, [1, BR, 128]))
    else:
        ptrs = yu_ptr + tl.cast(row, tl.int64) * y_stride + u_offs
        tl.store(ptrs, y, mask=u_mask & ((u_offs * 0 + row) < n_rows), cache_modifier=".cs")
    return spin_budget


@triton.jit
def _softmax_fwd_reread_kernel(
    x_ptr, xu_ptr, yu_ptr, partial_ptr, n_rows, n_blocks, x_stride, y_stride, max_spins,
    SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BR: tl.constexpr, IS_BF16: tl.constexpr, ASM: tl.constexpr,
    STAGES: tl.constexpr, SKEW: tl.constexpr, TMA1: tl.constexpr, TMA2: tl.constexpr, EV1: tl.constexpr,
    EV2: tl.constexpr, FALLBACK: tl.constexpr = 0, PF: tl.constexpr = 0, NB_STATIC: tl.constexpr = 0,
    TST: tl.constexpr = 0, WORD1: tl.constexpr = 0, BACKOFF: tl.constexpr = 0,
):  # fmt: skip
    PAD: tl.constexpr = -8323200 if IS_BF16 else -67044352  # two -inf per word
    if NB_STATIC > 0:  # the width compiled in (runtime widths made ptxas spill in the TMA kernels)
        n_blocks = NB_STATIC
    pid = tl.program_id(0)
    n_groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    chunk = pid % SPLIT
    b0 = chunk * BR
    desc = xu_ptr
    if TMA1 or TMA2:
        desc = tl.make_tensor_descriptor(xu_ptr, shape=[n_rows, n_blocks, 128], strides=[x_stride, 128, 1],
                                         block_shape=[1, BR, 128])  # fmt: skip
    ydesc = yu_ptr
    if TST:
        ydesc = tl.make_tensor_descriptor(yu_ptr, shape=[n_rows, n_blocks, 128], strides=[y_stride, 128, 1],
                                          block_shape=[1, BR, 128])  # fmt: skip
    blk = tl.arange(0, BR)[:, None]
    u_offs = (b0 + blk) * 128 + tl.arange(0, 128)[None, :]
    u_mask = ((b0 + blk) < n_blocks) & (tl.arange(0, 128)[None, :] >= 0)
    gbase = partial_ptr + group * (3 * SPLIT_P2)
    slot_stride = n_groups * (3 * SPLIT_P2)
    n_cols = 256 * n_blocks
    spin_budget = max_spins
    pf_bytes = tl.minimum(n_blocks - b0, BR) * 512  # (the chunk's words, contiguous: 16-byte multiple)
    # Arrivals 0 .. SKEW-1 (rows past the last too: every partner publishes them, so the epilogue never hangs).
    for k in tl.static_range(SKEW):
        _pass1(desc, xu_ptr, group + k * n_groups, k, n_rows, x_stride, b0, u_offs, u_mask, gbase, slot_stride, chunk,
               PAD, BR, SPLIT_P2, IS_BF16, ASM, TMA1, EV1, WORD1)  # fmt: skip
    if PF > 0:
        prefetch_rows(xu_ptr, group + (SKEW + STAGES - 1) * n_groups, PF, n_groups, n_rows, x_stride, b0 * 128,
                       pf_bytes)  # fmt: skip
    j = SKEW
    for row in tl.range(group + SKEW * n_groups, n_rows, n_groups, num_stages=STAGES):
        if PF > 0:
            prefetch_rows(xu_ptr, row + (STAGES - 1 + PF) * n_groups, 1, n_groups, n_rows, x_stride, b0 * 128,
                           pf_bytes)  # fmt: skip
        _pass1(desc, xu_ptr, row, j, n_rows, x_stride, b0, u_offs, u_mask, gbase, slot_stride, chunk, PAD, BR,
               SPLIT_P2, IS_BF16, ASM, TMA1, EV1, WORD1)  # fmt: skip
        spin_budget = _pass2(desc, ydesc, x_ptr, xu_ptr, yu_ptr, row - SKEW * n_groups, j - SKEW, n_rows, x_stride,
                             y_stride, n_cols, b0, u_offs, u_mask, gbase, slot_stride, spin_budget, PAD, BR, SPLIT,
                             SPLIT_P2, IS_BF16, ASM, FALLBACK, TMA2, EV2, TST, WORD1,
                             BACKOFF)  # fmt: skip
        j += 1  # noqa: SIM113 (a Triton loop-carried scalar)
    for k in tl.static_range(SKEW):  # the last SKEW arrivals (rows past the last: stores masked)
        jj = j - SKEW + k
        spin_budget = _pass2(desc, ydesc, x_ptr, xu_ptr, yu_ptr, group + jj * n_groups, jj, n_rows, x_stride, y_stride,
                             n_cols, b0, u_offs, u_mask, gbase, slot_stride, spin_budget, PAD, BR, SPLIT, SPLIT_P2,
                             IS_BF16, ASM, FALLBACK, TMA2, EV2, TST, WORD1, BACKOFF)  # fmt: skip


def softmax_forward_reread(
    x: torch.Tensor, y: torch.Tensor, *, blocks: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, stages: int | None = None, skew: int | None = None, tma1: int | None = None,
    tma2: int | None = None, ev1: int | None = None, ev2: int | None = None, l2_prefetch: int | None = None,
    tstore: int | None = None, word1: int | None = None, backoff: int | None = None, max_spins: int = 1 << 20,
    maxnreg: int | None = None, groups: int | None = None,
    static_width: bool = True,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over rows of the 2-D 16-bit ``x``, or None (nothing launched) when the rows do not fit
    the ``[N / 256, 128]`` word view (width a multiple of 256, 16-byte aligned rows) or one group cannot be
    resident. Under the interpreter (``groups`` groups, default 2) a program whose partners have not run computes
    the row's statistics itself. Options default to :data:`REREAD_CONFIG`."""
    if x.dtype not in (torch.bfloat16, torch.float16) or y.dtype != x.dtype:
        return None
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols % 256 or any(t.stride(1) != 1 or t.stride(0) % 8 or t.data_ptr() % 16 for t in (x, y)):
        return None
    given = dict(blocks=blocks, num_warps=num_warps, per_sm=per_sm, stages=stages, skew=skew, tma1=tma1, tma2=tma2,
                 ev1=ev1, ev2=ev2, l2_prefetch=l2_prefetch, tstore=tstore, word1=word1, backoff=backoff)  # fmt: skip
    o = {**REREAD_CONFIG, **{k: v for k, v in given.items() if v is not None}}
    if not 1 <= o["skew"] <= 3:
        raise SolkitError(f"softmax reread: skew must be 1, 2 or 3 (eight partial slots), got {o['skew']}")
    interp = not x.is_cuda or interpreting()
    br, nw = int(o["blocks"]), int(o["num_warps"])
    n_blocks = n_cols // 256
    split = triton.cdiv(n_blocks, br)
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BR=br,
                IS_BF16=int(x.dtype == torch.bfloat16), ASM=int(not interp), STAGES=int(o["stages"]),
                SKEW=int(o["skew"]), TMA1=int(o["tma1"]), TMA2=int(o["tma2"]), EV1=int(o["ev1"]), EV2=int(o["ev2"]),
                FALLBACK=int(interp), PF=0 if interp else int(o["l2_prefetch"]),
                NB_STATIC=n_blocks if static_width else 0, TST=int(o["tstore"]), num_warps=nw)  # fmt: skip
    meta.update(word_meta(int(o["word1"]), int(o["backoff"]), nw))
    launched = launch_grouped(_softmax_fwd_reread_kernel, x, y, meta, split, int(o["per_sm"]), nw, groups, max_spins,
                              maxnreg)  # fmt: skip
    return None if launched is None else {"path": "reread", **launched}
