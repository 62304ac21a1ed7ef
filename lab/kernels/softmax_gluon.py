"""Lab: row softmax forward for vocabulary-wide 16-bit rows in Gluon, a TMA loader warp feeding a shared-memory ring
(never dispatched: 0.87 of the copy against the product's 0.93, docs/kernels/softmax-gluon.md; run it through
:func:`softmax_forward_gluon`).

Math (fp32, base-2 exponentials, ``L = log2 e``). The row of ``N`` columns is cut into ``SPLIT`` chunks, one per
program of a *group*; ``G`` groups of ``SPLIT`` co-resident programs walk rows ``g, g + G, ...``. For chunk ``c``:

* pass 1 (from shared memory): ``m_c = max x``, ``s_c = sum 2^((x - m_c) L)``; the chunk publishes one tagged
  64-bit word (:mod:`solkit.kernels.common.spin`'s protocol: ``(j + 1) << 32 | fp32 bits``) holding its base-2
  log-sum-exp ``l_c = m_c L + log2 s_c`` (one word, not two: half the polling traffic in L2);
* exchange: ``lse_2 = max_i l_i + log2 sum_i 2^(l_i - max_i l_i)``, the words read by a bounded PTX spin;
* pass 2 (the chunk read again from shared memory): ``y = 2^(x L - lse_2)``, streaming (``.cs``) stores; with
  ``KEEPE`` pass 1 writes ``e = 2^((x - m_ref) L)`` back over x as 16-bit pairs and pass 2 is
  ``y = e 2^(m_ref L - lse_2)`` (one ``fma.rn.bf16x2`` a pair for bf16, an fp32 multiply for fp16).

Structure. The row is viewed as ``[N / 256, 128]`` int32 words (two 16-bit values a word), loaded as ``NBOX`` TMA
boxes of ``[1, BR, 128]`` words a chunk. Balanced chunks (``ALIGN`` 0) cover blocks ``[c B / SPLIT, (c + 1) B /
SPLIT)`` of the ``B = N / 256`` blocks, the last box moved back to end at the chunk's end (its repeated blocks are
masked; they are read twice from L2); aligned chunks (``ALIGN`` 1) are ``NBOX BR`` blocks, the row's last one
shorter, and no block is read twice. A 1-warp *loader* partition keeps a ring of ``STAGES`` chunk slots full (one
``ready`` mbarrier a slot with the TMA byte count, one ``empty`` mbarrier a slot released by the compute warps).
``MODE`` 0: one compute partition runs pass 1 of row ``i``, publishes it, then pass 2 of row ``i - LAG``. ``MODE``
1: pass 1 runs in a worker partition of its own (``SWARPS`` warps), pass 2 in the default partition, and both
release the slot. The loader never waits for the exchange: rows are in flight in shared memory, not registers.
The first read of a row's words is issued before the work that precedes its use (their L2 latency hidden).

Deadlock rule: all programs of a group must be resident at once (the launcher sizes the grid from the compiled
kernel's shared memory and registers) and the spin is bounded (``max_spins``): on a timeout the row is written
as NaN and the program never waits again (a visible failure, never a hang).

Bytes per call, ``M x N`` of ``e`` bytes: read ``M N e``, write ``M N e`` (the tagged words stay in L2).

Over 500 lines: the kernel, its partitions, its plan and its launcher are one experiment, kept whole as a record.
"""

from __future__ import annotations

from typing import Any

import torch

from solkit.kernels.common.device import cuda_sm_count, gluon_unavailable_reason
from solkit.kernels.common.exchange import resident_programs

try:  # Gluon is experimental: without it (older Triton) or with a changed API this path is only unavailable
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # Triton 3.6 names: async_copy_global_to_shared, thread_barrier; later versions async_load, barrier
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - depends on the installed Triton
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

#: Launch defaults: ``split`` programs a row (0: picked from the width), ``box`` 128-word blocks a TMA box,
#: ``stages`` ring slots (0: as many as the shared memory holds), compute ``warps``, ``lag`` rows between pass 1
#: and pass 2, ``per_sm`` programs an SM, ``hint`` 1: streaming (``.cs``) stores, ``mode``, ``align``, ``keep_e``.
#: The fastest form measured on the H200 (docs/kernels/softmax-gluon.md): aligned chunks, kept exponentials, one
#: compute partition, 3 programs an SM.
GLUON_CONFIG = {
    "split": 0,
    "box": 0,
    "stages": 0,
    "warps": 4,
    "lag": 1,
    "per_sm": 3,
    "hint": 1,
    "target": 40,
    "mode": 0,
    "align": 1,
    "keep_e": 1,
}
SMEM_PER_SM = 228 * 1024  # H100/H200: 228 KB an SM, at most 227 KB a block, 1 KB reserved by the driver a block
SMEM_PER_BLOCK = 227 * 1024
MAX_STAGES = 64


def stat_slots(stages: int) -> int:
    """Rotating slots of tagged words a group: at least 16 and 2 ``stages``. A program publishes row ``i`` only
    after its own pass 2 of row ``i - STAGES`` (mode 1; ``i - LAG - 1`` in mode 0), which needed every partner's
    words of that row, so no partner still reads a row older than ``i - 2 STAGES`` (``i - 2 LAG - 1``)."""
    return 16 if stages <= 8 else 32 if stages <= 16 else 64 if stages <= 32 else 128


L2E_PY = 1.4426950408889634


def unavailable_reason(device: torch.device | None = None) -> str | None:
    """Why the kernel cannot run on ``device`` (default: the current CUDA device), or None if it can."""
    return gluon_unavailable_reason(_IMPORT_ERROR, device)


if _IMPORT_ERROR is None:
    L2E = gl.constexpr(L2E_PY)

    @gluon.jit
    def _box_start(b0, c1, k, BR: gl.constexpr):
        # box k of the chunk starting at b0: b0 + k BR, moved back to end at c1 when it would run past it (balanced
        # chunks: c1 = the chunk's end, the repeated blocks are masked); aligned chunks pass c1 = b0 + NBOX BR, so
        # only the row's last chunk runs past its end, into the zeros the TMA unit fills without reading memory
        return gl.minimum(b0 + k * BR, gl.maximum(c1 - BR, b0))

    @gluon.jit
    def _loader(x_desc, ring, ready, empty, group, n_groups, n_mine, b0, b1, c1, STAGES: gl.constexpr,
                NBOX: gl.constexpr, BR: gl.constexpr):  # fmt: skip
        # one warp: refill each slot with the program's chunk of its next row as soon as the compute warps free it
        for i in range(n_mine):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), NBOX * x_desc.block_type.nbytes)
            row = group + i * n_groups
            for k in gl.static_range(NBOX):
                _tma_load(x_desc, [row, _box_start(b0, c1, k, BR), 0], ready.index(s), ring.index(s * NBOX + k))

    @gluon.jit
    def _unpack(w, IS_BF16: gl.constexpr):
        # two 16-bit values of an int32 word (the even column in the low half) -> fp32
        if IS_BF16:
            lo = (w << 16).to(gl.float32, bitcast=True)
            hi = (w & -65536).to(gl.float32, bitcast=True)
        else:
            lo = (w & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)
            hi = (w >> 16).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)
        return lo, hi

    @gluon.jit
    def _pack(lo, hi, IS_BF16: gl.constexpr):
        # fp32 pairs -> one word, one cvt.rn.{bf16,f16}x2.f32 each (full rate)
        cvt: gl.constexpr = "cvt.rn.bf16x2.f32 $0, $1, $2;" if IS_BF16 else "cvt.rn.f16x2.f32 $0, $1, $2;"
        return gl.inline_asm_elementwise(cvt, "=r,f,f", [hi, lo], dtype=gl.int32, is_pure=True, pack=1)

    @gluon.jit
    def _box_blocks(b0, b1, c1, k, BR: gl.constexpr, L3: gl.constexpr):
        # [1, BR, 1] block indices of box k and whether each is this box's to use (in [b0, b1), not a repeat)
        j = gl.arange(0, BR, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))
        g = gl.expand_dims(gl.expand_dims(j, 0), 2) + _box_start(b0, c1, k, BR)
        return g, (g >= b0 + k * BR) & (g < b1)

    @gluon.jit
    def _box_words(ring, slot, b0, b1, c1, k, NBOX: gl.constexpr, BR: gl.constexpr, IS_BF16: gl.constexpr,
                   L3: gl.constexpr, MASKED: gl.constexpr):  # fmt: skip
        # box k of the slot as words; with MASKED, two -inf for blocks that are not this box's to use
        PAD: gl.constexpr = -8323200 if IS_BF16 else -67044352
        w = ring.index(slot * NBOX + k).load(L3)
        if MASKED:
            _g, ok = _box_blocks(b0, b1, c1, k, BR, L3)
            w = gl.where(ok, w, PAD)
        return w

    @gluon.jit
    def _reduce_all(t, MAX: gl.constexpr):
        # over the block rows first (in-thread, then one exchange between the warps), then the 128 columns (shuffles)
        if MAX:
            return gl.max(gl.max(gl.max(t, axis=1), axis=1), axis=0)
        else:
            return gl.sum(gl.sum(gl.sum(t, axis=1), axis=1), axis=0)

    @gluon.jit
    def _pass1(ring, slot, b0, b1, c1, NBOX: gl.constexpr, BR: gl.constexpr, IS_BF16: gl.constexpr, L3: gl.constexpr,
               KEEPE: gl.constexpr, MASKED: gl.constexpr):  # fmt: skip
        # the chunk's (max, sum 2^((x - max) L)): the max first (packed pairs, max.{bf16,f16}x2, elementwise over
        # the boxes, unpacked once, one reduction), then the sum from a second read of shared memory: two exchanges
        # between the warps a row whatever NBOX is
        MAX2: gl.constexpr = "max.bf16x2 $0, $1, $2;" if IS_BF16 else "max.f16x2 $0, $1, $2;"
        mx = _box_words(ring, slot, b0, b1, c1, 0, NBOX, BR, IS_BF16, L3, MASKED)
        for k in gl.static_range(1, NBOX):
            w = _box_words(ring, slot, b0, b1, c1, k, NBOX, BR, IS_BF16, L3, MASKED)
            mx = gl.inline_asm_elementwise(MAX2, "=r,r,r", [mx, w], dtype=gl.int32, is_pure=True, pack=1)
        lo, hi = _unpack(mx, IS_BF16)
        m = _reduce_all(gl.maximum(lo, hi), True)
        m_ref = gl.where(m == -float("inf"), 0.0, m) * L2E
        e = gl.zeros([1, BR, 128], gl.float32, L3)
        for k in gl.static_range(NBOX):
            lo, hi = _unpack(_box_words(ring, slot, b0, b1, c1, k, NBOX, BR, IS_BF16, L3, MASKED), IS_BF16)
            e_lo = gl.exp2(lo * L2E - m_ref)
            e_hi = gl.exp2(hi * L2E - m_ref)
            e += e_lo + e_hi
            if KEEPE:  # the exponentials replace x in the slot (16-bit pairs): pass 2 only scales them
                ring.index(slot * NBOX + k).store(_pack(e_lo, e_hi, IS_BF16))
        return m, _reduce_all(e, False), m_ref

    @gluon.jit
    def _lg2(v):
        # one MUFU.LG2 (relative error ~2^-22) instead of the precise log2's ~25 instructions
        return gl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=f,f", [v], dtype=gl.float32, is_pure=True,
                                         pack=1)  # fmt: skip

    @gluon.jit
    def _publish(base, chunk, j, l_c, L1: gl.constexpr):
        # lane `chunk` of arrival j: one 64-bit word, (j + 1) << 32 | fp32 bits of the chunk's log2-sum-exp2
        # l_c = m_c L + log2 s_c, by one relaxed atomic exchange (one thread)
        idx = gl.arange(0, 2, layout=L1)
        word = ((j + 1).to(gl.int64) << 32) | (l_c.to(gl.int32, bitcast=True).to(gl.int64) & 0xFFFFFFFF)
        gl.atomic_xchg(base + chunk + idx * 0, gl.full([2], 0, gl.int64, L1) + word, mask=idx == 0, sem="relaxed",
                       scope="gpu")  # fmt: skip

    @gluon.jit
    def _poll(base, SPLIT: gl.constexpr, SP2: gl.constexpr, L1: gl.constexpr):
        # a first read of the group's words (volatile loads: the caller's work hides their L2 latency)
        offs = gl.arange(0, SP2, layout=L1)
        return gl.load(base + gl.where(offs < SPLIT, offs, 0), volatile=True)

    @gluon.jit
    def _spin(base, j, budget, w, SPLIT: gl.constexpr, SP2: gl.constexpr, L1: gl.constexpr):
        # arrival j's words of every chunk from a first read w, re-read in PTX until every tag reads j + 1, at most
        # `budget` times: the row's base-2 log-sum-exp pieces (L = max l_i, S = sum 2^(l_i - L)) and 1 if every
        # partner arrived
        offs = gl.arange(0, SP2, layout=L1)
        zero = gl.full([SP2], 0, gl.int32, L1)
        w = gl.inline_asm_elementwise(
            "{ .reg .pred p, q; .reg .b32 lo, hi, n; mov.u32 n, 0; mov.b64 $0, $4; "
            "CHECK: mov.b64 {lo, hi}, $0; setp.eq.u32 p, hi, $2; @p bra DONE; setp.lt.u32 q, n, $3; @!q bra DONE; "
            "add.u32 n, n, 1; ld.volatile.global.b64 $0, [$1]; bra CHECK; DONE: }",
            "=l,l,r,r,l", [base + gl.where(offs < SPLIT, offs, 0), zero + (j + 1), zero + budget, w],
            dtype=gl.int64, is_pure=False, pack=1,
        )  # fmt: skip
        ok = (w >> 32) == (j + 1).to(gl.int64)
        ready = gl.min(gl.where(offs < SPLIT, ok, True).to(gl.int32), axis=0)
        ls = gl.where(offs < SPLIT, (w & 0xFFFFFFFF).to(gl.int32).to(gl.float32, bitcast=True), -float("inf"))
        big = gl.max(ls, axis=0)
        return big, gl.sum(gl.exp2(ls - big), axis=0), ready

    @gluon.jit
    def _pass2(ring, slot, yrow_ptr, b0, b1, c1, lse2, m_ref, NBOX: gl.constexpr, BR: gl.constexpr,
               IS_BF16: gl.constexpr, HINT: gl.constexpr, L3: gl.constexpr, KEEPE: gl.constexpr):  # fmt: skip
        col = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3)))
        col3 = gl.expand_dims(gl.expand_dims(col, 0), 1)
        for k in gl.static_range(NBOX):
            w = ring.index(slot * NBOX + k).load(L3)
            g, ok = _box_blocks(b0, b1, c1, k, BR, L3)
            if KEEPE:  # y = e 2^(m_ref L - lse_2): bf16, one fma.rn.bf16x2 a pair; fp16, in fp32
                c = gl.exp2(m_ref - lse2)
                if IS_BF16:
                    cw = gl.full([1, BR, 128], 0, gl.int32, L3) + _pack(c, c, True)
                    zw = gl.full([1, BR, 128], -2147450880, gl.int32, L3)  # (-0, -0): e c + (-0) = e c
                    y = gl.inline_asm_elementwise("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r", [w, cw, zw],
                                                  dtype=gl.int32, is_pure=True, pack=1)  # fmt: skip
                else:
                    lo, hi = _unpack(w, IS_BF16)
                    y = _pack(lo * c, hi * c, IS_BF16)
            else:
                lo, hi = _unpack(w, IS_BF16)
                y = _pack(gl.exp2(lo * L2E - lse2), gl.exp2(hi * L2E - lse2), IS_BF16)
            ptrs = yrow_ptr + g * 128 + col3
            mask = ok & (col3 < 128)
            if HINT >= 1:
                gl.store(ptrs, y, mask=mask, cache_modifier=".cs")
            else:
                gl.store(ptrs, y, mask=mask)

    @gluon.jit
    def _stats_row(ring, ready, mrefs, i, gbase, chunk, b0, b1, c1, SP2: gl.constexpr, BR: gl.constexpr,
                   NBOX: gl.constexpr, STAGES: gl.constexpr, IS_BF16: gl.constexpr, L3: gl.constexpr,
                   L1: gl.constexpr, KEEPE: gl.constexpr):  # fmt: skip
        NS: gl.constexpr = 16 if STAGES <= 8 else 32 if STAGES <= 16 else 64 if STAGES <= 32 else 128  # stat_slots
        # pass 1 of the program's row i (once its slot is loaded), published as arrival i
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        if b1 - b0 == NBOX * BR:  # the boxes tile the chunk exactly: no block to mask
            m_c, s_c, m_ref = _pass1(ring, s, b0, b1, c1, NBOX, BR, IS_BF16, L3, KEEPE, False)
        else:
            m_c, s_c, m_ref = _pass1(ring, s, b0, b1, c1, NBOX, BR, IS_BF16, L3, KEEPE, True)
        if KEEPE:  # the reference of the kept exponentials, for pass 2 (lane l of every warp: its own word)
            mrefs.index(s).store(gl.full([32], 0.0, gl.float32, L1) + m_ref)
        _publish(gbase + (i % NS) * SP2, chunk, i, m_c * L2E + _lg2(s_c), L1)

    @gluon.jit
    def _write_row(ring, empty, mrefs, r, gbase, budget, w, yu_ptr, row, y_stride, b0, b1, c1, SPLIT: gl.constexpr,
                   SP2: gl.constexpr, BR: gl.constexpr, NBOX: gl.constexpr, STAGES: gl.constexpr,
                   IS_BF16: gl.constexpr, HINT: gl.constexpr, L3: gl.constexpr, L1: gl.constexpr,
                   KEEPE: gl.constexpr):  # fmt: skip
        NS: gl.constexpr = 16 if STAGES <= 8 else 32 if STAGES <= 16 else 64 if STAGES <= 32 else 128  # stat_slots
        # pass 2 of the program's row r once the partners' words are in, then its slot back to the loader;
        # returns the spin budget left (0 after a timeout: that row is NaN and no program waits again)
        big, total, ok = _spin(gbase + (r % NS) * SP2, r, budget, w, SPLIT, SP2, L1)
        if ok == 0:
            big = big + float("nan")
            budget = 0
        lse2 = big + _lg2(total)  # log2 of the row's sum of 2^(x L)
        m_ref = 0.0
        if KEEPE:
            m_ref = gl.max(mrefs.index(r % STAGES).load(L1), axis=0)
        _pass2(ring, r % STAGES, yu_ptr + row.to(gl.int64) * y_stride, b0, b1, c1, lse2, m_ref, NBOX, BR, IS_BF16, HINT,
               L3, KEEPE)  # fmt: skip
        _cta_barrier()  # every warp of the partition is done reading the slot before the loader may refill it
        mbarrier.arrive(empty.index(r % STAGES))
        return budget

    @gluon.jit
    def _compute(ring, ready, empty, sdone, mrefs, yu_ptr, part_ptr, group, chunk, n_groups, n_mine, b0, b1, c1,
                 y_stride, max_spins, SPLIT: gl.constexpr, SP2: gl.constexpr, BR: gl.constexpr, NBOX: gl.constexpr,
                 STAGES: gl.constexpr, LAG: gl.constexpr, IS_BF16: gl.constexpr, HINT: gl.constexpr,
                 WARPS: gl.constexpr, KEEPE: gl.constexpr):  # fmt: skip
        NS: gl.constexpr = 16 if STAGES <= 8 else 32 if STAGES <= 16 else 64 if STAGES <= 32 else 128  # stat_slots
        # MODE 0: one partition runs pass 1 of row i, then pass 2 of row i - LAG (every thread reads back only the
        # exponentials and references it wrote itself: no barrier between the passes)
        L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 1, 32], [1, WARPS, 1], [2, 1, 0])
        L1: gl.constexpr = gl.SliceLayout(0, gl.BlockedLayout([1, 1], [1, 32], [WARPS, 1], [1, 0]))
        gbase = part_ptr + group * (NS * SP2)
        budget = max_spins
        for i in range(n_mine + LAG):
            r = i - LAG
            w = _poll(gbase + (gl.maximum(r, 0) % NS) * SP2, SPLIT, SP2, L1)  # on its way during pass 1 of row i
            if i < n_mine:
                _stats_row(ring, ready, mrefs, i, gbase, chunk, b0, b1, c1, SP2, BR, NBOX, STAGES, IS_BF16, L3, L1,
                           KEEPE)  # fmt: skip
            if i >= LAG:
                budget = _write_row(ring, empty, mrefs, r, gbase, budget, w, yu_ptr, group + r * n_groups, y_stride,
                                    b0, b1, c1, SPLIT, SP2, BR, NBOX, STAGES, IS_BF16, HINT, L3, L1,
                                    KEEPE)  # fmt: skip

    @gluon.jit
    def _writer(ring, ready, empty, sdone, mrefs, yu_ptr, part_ptr, group, chunk, n_groups, n_mine, b0, b1, c1,
                y_stride, max_spins, SPLIT: gl.constexpr, SP2: gl.constexpr, BR: gl.constexpr, NBOX: gl.constexpr,
                STAGES: gl.constexpr, LAG: gl.constexpr, IS_BF16: gl.constexpr, HINT: gl.constexpr,
                WARPS: gl.constexpr, KEEPE: gl.constexpr):  # fmt: skip
        NS: gl.constexpr = 16 if STAGES <= 8 else 32 if STAGES <= 16 else 64 if STAGES <= 32 else 128  # stat_slots
        # MODE 1, the default partition: pass 2 of each row as soon as its slot is loaded (KEEPE: its exponentials
        # written, `sdone`) and the words are in
        L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 1, 32], [1, WARPS, 1], [2, 1, 0])
        L1: gl.constexpr = gl.SliceLayout(0, gl.BlockedLayout([1, 1], [1, 32], [WARPS, 1], [1, 0]))
        gbase = part_ptr + group * (NS * SP2)
        budget = max_spins
        w = _poll(gbase, SPLIT, SP2, L1)
        for r in range(n_mine):
            if KEEPE:
                mbarrier.wait(sdone.index(r % STAGES), (r // STAGES) & 1)
            else:
                mbarrier.wait(ready.index(r % STAGES), (r // STAGES) & 1)
            # row r + 1's words on their way during this row's pass 2 (a stale read only costs a re-read)
            w_next = _poll(gbase + ((r + 1) % NS) * SP2, SPLIT, SP2, L1)
            budget = _write_row(ring, empty, mrefs, r, gbase, budget, w, yu_ptr, group + r * n_groups, y_stride, b0,
                                b1, c1, SPLIT, SP2, BR, NBOX, STAGES, IS_BF16, HINT, L3, L1, KEEPE)  # fmt: skip
            w = w_next

    @gluon.jit
    def _stats_worker(ring, ready, empty, sdone, mrefs, part_ptr, group, chunk, n_mine, b0, b1, c1,
                      SP2: gl.constexpr, BR: gl.constexpr, NBOX: gl.constexpr, STAGES: gl.constexpr,
                      IS_BF16: gl.constexpr, SWARPS: gl.constexpr, KEEPE: gl.constexpr):  # fmt: skip
        NS: gl.constexpr = 16 if STAGES <= 8 else 32 if STAGES <= 16 else 64 if STAGES <= 32 else 128  # stat_slots
        # MODE 1, a worker partition: pass 1 of each row, published; then the slot goes to the writer (KEEPE: the
        # exponentials written, `sdone`) or its share of the release to the loader
        L3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 1, 32], [1, SWARPS, 1], [2, 1, 0])
        L1: gl.constexpr = gl.SliceLayout(0, gl.BlockedLayout([1, 1], [1, 32], [SWARPS, 1], [1, 0]))
        gbase = part_ptr + group * (NS * SP2)
        for i in range(n_mine):
            _stats_row(ring, ready, mrefs, i, gbase, chunk, b0, b1, c1, SP2, BR, NBOX, STAGES, IS_BF16, L3, L1,
                       KEEPE)  # fmt: skip
            _cta_barrier()  # every stats warp is done with the slot (and its writes) before the arrival
            if KEEPE:
                mbarrier.arrive(sdone.index(i % STAGES))
            else:
                mbarrier.arrive(empty.index(i % STAGES))

    @gluon.jit
    def _softmax_fwd_gluon_kernel(x_desc, yu_ptr, part_ptr, n_rows, n_blocks, y_stride, max_spins,
                                  SPLIT: gl.constexpr, SP2: gl.constexpr, NBOX: gl.constexpr, STAGES: gl.constexpr,
                                  LAG: gl.constexpr, IS_BF16: gl.constexpr, HINT: gl.constexpr,
                                  WARPS: gl.constexpr, LOADER_REGS: gl.constexpr, MODE: gl.constexpr = 0,
                                  SWARPS: gl.constexpr = 4, STATS_REGS: gl.constexpr = 128,
                                  ALIGN: gl.constexpr = 0, KEEPE: gl.constexpr = 0):  # fmt: skip
        BR: gl.constexpr = x_desc.block_type.shape[1]
        pid = gl.program_id(0)
        n_groups = gl.num_programs(0) // SPLIT
        group = pid // SPLIT
        chunk = pid % SPLIT
        if ALIGN:  # chunks of NBOX BR blocks, the row's last one shorter
            b0 = chunk * (NBOX * BR)
            b1 = gl.minimum(b0 + NBOX * BR, n_blocks)
            c1 = b0 + NBOX * BR
        else:  # balanced chunks
            b0 = chunk * n_blocks // SPLIT
            b1 = (chunk + 1) * n_blocks // SPLIT
            c1 = b1
        n_mine = (n_rows - group + n_groups - 1) // n_groups
        ring = gl.allocate_shared_memory(gl.int32, [STAGES * NBOX, 1, BR, 128], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        sdone = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mrefs = gl.allocate_shared_memory(gl.float32, [STAGES, 32], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        for p in gl.static_range(STAGES):
            mbarrier.init(ready.index(p), count=1)
            # MODE 1 without KEEPE: released by the writer and the stats warps; else by the last reader alone
            mbarrier.init(empty.index(p), count=2 if MODE == 1 and not KEEPE else 1)
            mbarrier.init(sdone.index(p), count=1)
        fence_async_shared()
        if MODE == 0:
            gl.warp_specialize(
                [
                    (_compute, (ring, ready, empty, sdone, mrefs, yu_ptr, part_ptr, group, chunk, n_groups, n_mine,
                                b0, b1, c1, y_stride, max_spins, SPLIT, SP2, BR, NBOX, STAGES, LAG, IS_BF16, HINT,
                                WARPS, KEEPE)),
                    (_loader, (x_desc, ring, ready, empty, group, n_groups, n_mine, b0, b1, c1, STAGES, NBOX, BR)),
                ],
                [1],
                [LOADER_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_writer, (ring, ready, empty, sdone, mrefs, yu_ptr, part_ptr, group, chunk, n_groups, n_mine,
                               b0, b1, c1, y_stride, max_spins, SPLIT, SP2, BR, NBOX, STAGES, LAG, IS_BF16, HINT,
                               WARPS, KEEPE)),
                    (_loader, (x_desc, ring, ready, empty, group, n_groups, n_mine, b0, b1, c1, STAGES, NBOX, BR)),
                    (_stats_worker, (ring, ready, empty, sdone, mrefs, part_ptr, group, chunk, n_mine, b0, b1, c1,
                                     SP2, BR, NBOX, STAGES, IS_BF16, SWARPS, KEEPE)),
                ],
                [1, SWARPS],
                [LOADER_REGS, STATS_REGS],
            )  # fmt: skip


def _layout() -> Any:
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)


def plan(n_cols: int, sms: int, *, split: int = 0, box: int = 0, stages: int = 0, per_sm: int = 0,
         target: int = 0, warps: int = 4, align: int = 0, nbox: int = 0) -> dict | None:  # fmt: skip
    """The launch layout for rows of ``n_cols`` (a multiple of 256) on ``sms`` SMs: ``split`` programs a row, ``box``
    blocks a TMA box, ``nbox`` boxes a chunk, ``stages`` ring slots (default: all that fit), ``groups``; None when
    nothing fits. Balanced chunks (``align`` 0; default split: the divisor of the resident slots whose chunk is nearest
    ``target`` blocks; default box: 8-64, the fewest padded blocks) or aligned chunks of ``nbox * box`` blocks, the
    row's last one shorter (``align`` 1: no block is read twice from L2; default: the most resident slots used,
    then the chunk nearest ``target``)."""
    cfg = GLUON_CONFIG
    n_blocks = n_cols // 256
    per_sm = per_sm or cfg["per_sm"]
    slots = per_sm * sms
    target = target or cfg["target"]
    if align:
        if split and not nbox:
            per_chunk = -(-n_blocks // split)
            nbox = -(-per_chunk // (box or 16))
        shapes = [(b, k) for b in ((box,) if box else (8, 16, 32)) for k in ((nbox,) if nbox else range(1, 9))]
        room = min(SMEM_PER_BLOCK, SMEM_PER_SM // per_sm - 1024) - 512 * warps - 256
        shapes = [(b, k) for b, k in shapes
                  if -(-n_blocks // (b * k)) <= slots and room // (b * k * 512 + 160) >= max(2, stages)]  # fmt: skip
        if not shapes:
            return None

        def score(bk):
            n_split = -(-n_blocks // (bk[0] * bk[1]))
            return (-(slots // n_split) * n_split, abs(bk[0] * bk[1] - target), -bk[0])

        box, nbox = min(shapes, key=score)
        chunk = box * nbox
        split = -(-n_blocks // chunk)
    else:
        if not split:
            divisors = [d for d in range(1, slots + 1) if slots % d == 0 and d <= n_blocks]
            split = min(divisors, key=lambda d: (abs(n_blocks / d - target), d))
        split = min(split, n_blocks)
        chunk = -(-n_blocks // split)
        if not box:  # the least padding (compute spent on masked blocks), then the fewest boxes
            box = min((8, 16, 32, 64), key=lambda b: (-(-chunk // b) * b, -b))
        nbox = -(-chunk // box)
    slot_bytes = nbox * box * 512
    # less the barriers and the reductions' scratch (512 bytes a compute warp: Triton 3.6, sm_90)
    budget = min(SMEM_PER_BLOCK, SMEM_PER_SM // per_sm - 1024) - 512 * warps - 256
    per_stage = slot_bytes + 160  # + three mbarriers and the kept exponentials' reference (32 floats)
    stages = stages or min(MAX_STAGES, budget // per_stage)
    if stages < 2 or stages > MAX_STAGES or stages * per_stage > budget or slots // split < 1:
        return None
    return {"split": split, "box": box, "nbox": nbox, "stages": stages, "per_sm": per_sm, "chunk_blocks": chunk,
            "slot_bytes": slot_bytes, "groups": slots // split, "align": int(bool(align))}  # fmt: skip


def _stat_words(n_groups: int, n_slots: int, sp2: int, device: torch.device) -> torch.Tensor:
    # zeroed every call: the tags restart at 1
    return torch.zeros(n_groups * n_slots * sp2, dtype=torch.int64, device=device)


_COMPILED: dict = {}


def softmax_forward_gluon(
    x: torch.Tensor, y: torch.Tensor, *, split: int = 0, box: int = 0, stages: int = 0, warps: int | None = None,
    lag: int | None = None, per_sm: int = 0, hint: int | None = None, target: int = 0, groups: int | None = None,
    max_spins: int = 1 << 20, loader_regs: int = 40, maxnreg: int | None = None, mode: int | None = None,
    stats_warps: int = 4, stats_regs: int = 0, align: int | None = None, nbox: int = 0, keep_e: int | None = None,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over the rows of the 2-D 16-bit CUDA tensor ``x`` (``y`` preallocated, same shape and
    dtype), or None (nothing launched) where the kernel does not apply: no sm_90 / Gluon, other dtypes, a width
    that is not a multiple of 256, rows not 16-byte aligned, or a group that cannot be resident. Returns the
    launch facts. Knobs: see :func:`plan` (``split``, ``box``, ``nbox``, ``stages``, ``per_sm``, ``target``,
    ``align``); ``keep_e`` (1: pass 1's exponentials replace x in shared memory as 16-bit pairs and pass 2 only
    scales them: one exponential an element, not two); ``warps`` (compute); ``lag`` (mode 0); ``mode`` (1: pass 1
    in a partition of its own with ``stats_warps``); ``hint`` (0: plain stores); ``groups`` (at most);
    ``max_spins``; ``maxnreg`` caps the registers a thread at launch (default: what ``per_sm`` programs need)."""
    if unavailable_reason(x.device if x.is_cuda else None) is not None or not x.is_cuda:
        return None
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16) or y.dtype != x.dtype or y.shape != x.shape:
        return None
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols % 256 or any(t.stride(1) != 1 or t.stride(0) % 8 or t.data_ptr() % 16 for t in (x, y)):
        return None
    cfg = GLUON_CONFIG
    warps = warps or cfg["warps"]
    lag = cfg["lag"] if lag is None else lag
    mode = cfg["mode"] if mode is None else mode
    scratch_warps = warps + (stats_warps if mode else 0)
    if not 0 <= lag <= 7:  # 2 LAG + 1 < 16 stat slots
        return None
    align = cfg["align"] if align is None else align
    p = plan(n_cols, cuda_sm_count(x.device), split=split, box=box, stages=stages, per_sm=per_sm,
             target=target, warps=scratch_warps, align=align, nbox=nbox)  # fmt: skip
    if p is None or p["stages"] <= lag:
        return None
    n_blocks = n_cols // 256
    sp2 = max(triton.next_power_of_2(p["split"]), 2)
    xu = x.view(torch.int32)
    desc = TensorDescriptor(xu, [n_rows, n_blocks, 128], [x.stride(0) // 2, 128, 1], [1, p["box"], 128], _layout())
    meta = dict(SPLIT=p["split"], SP2=sp2, NBOX=p["nbox"], STAGES=p["stages"], LAG=lag, IS_BF16=int(x.dtype ==
                torch.bfloat16), HINT=int(cfg["hint"] if hint is None else hint), WARPS=warps,
                LOADER_REGS=loader_regs, ALIGN=p["align"], KEEPE=int(cfg["keep_e"] if keep_e is None else keep_e),
                num_warps=warps)  # fmt: skip
    launched = _launched_warps(warps, mode, stats_warps)
    if mode:
        meta.update(MODE=1, SWARPS=stats_warps, STATS_REGS=stats_regs or _stats_regs(warps, stats_warps, p["per_sm"]))
    if maxnreg or p["per_sm"] > 1:  # registers for per_sm programs of all the warps
        meta["maxnreg"] = maxnreg or 65536 // (p["per_sm"] * launched * 32) // 8 * 8
    n_groups = min(n_rows, groups or p["groups"], p["groups"])
    parts = _stat_words(n_groups, stat_slots(p["stages"]), sp2, x.device)
    args = [desc, y.view(torch.int32), parts, n_rows, n_blocks, y.stride(0) // 2, max_spins]
    key = (x.device.index, n_blocks, tuple(sorted(meta.items())))
    if key not in _COMPILED:  # compile without a launch: the whole grid must be resident at once
        kernel = _softmax_fwd_gluon_kernel.warmup(*args, grid=(1,), **meta)
        _COMPILED[key] = resident_programs(kernel, launched, x.device)
    capacity, occ = _COMPILED[key]
    n_groups = min(n_groups, capacity // p["split"])
    if n_groups < 1:
        return None
    _softmax_fwd_gluon_kernel[(n_groups * p["split"],)](*args, **meta)
    return {"path": "gluon", **p, "groups": n_groups, "warps": warps, "lag": lag, "mode": mode, **occ}


def _launched_warps(warps: int, mode: int, stats_warps: int) -> int:
    # Triton 3.6 rounds the worker partitions (the loader warp, MODE 1's stats warps) up to whole warpgroups
    return warps + -(-(1 + (stats_warps if mode else 0)) // 4) * 4


def _stats_regs(warps: int, stats_warps: int, per_sm: int) -> int:
    # MODE 1's stats partition: its share of the registers a program has (setmaxnreg: multiples of 8, 24-256)
    per_thread = 65536 // (per_sm * _launched_warps(warps, 1, stats_warps) * 32)
    return max(24, min(256, per_thread // 8 * 8))
