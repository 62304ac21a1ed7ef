"""Row softmax for vocabulary-wide rows, forward and backward, with one DRAM read: register-held row chunks.

The design of the packed cross-entropy kernel (:mod:`solkit.kernels.cross_entropy.packed`), whose traffic (one read of
the row, one write) is a softmax forward's: the row of ``N`` columns is cut into ``SPLIT`` chunks of at most
``BLOCK`` columns; ``G`` groups of ``SPLIT`` resident programs walk rows ``g, g + G, ...``; a program keeps its
chunk **in registers** while the row's statistics are exchanged with its ``SPLIT - 1`` partners, so the row is
read from DRAM once and never re-read.

Forward, chunk ``c`` of row ``x`` (fp32 math, base-2 exponentials, ``L = log2 e``):

* pass 1: ``m_c = max x``, ``s_c = sum 2^((x - m_c) L)``; publish ``(m_c, s_c)``;
* exchange: ``M = max m_i``, ``S = sum_i s_i 2^((m_i - M) L)``;
* pass 2: ``y = 2^(x L - lse_2)``, ``lse_2 = M L + log2 S`` (``lg2.approx`` on a GPU), recomputed from the
  chunk's 16-bit inputs kept as loaded (``KEEP_E = 0``), or ``y = e 2^(m_c L - lse_2)`` from pass 1's
  exponentials kept as f16 pairs (``KEEP_E = 1``: one FMUL per element instead of FFMA + EX2, relative error
  2^-12 more); fp32 inputs ``y = 2^((x - M) L) / S`` (the exact difference first).

Backward: pass 1 ``d_c = sum y dy`` over the chunk (``y`` and ``dy`` kept as loaded), publish ``d_c``;
``d = sum_i d_i``; pass 2 ``dx = y (dy - d)``.

Bytes per call, ``M x N`` of ``e`` bytes: forward ``2 M N e`` (read x, write y), backward ``3 M N e`` (read
y and dy, write dx); the partials (``16 SPLIT`` bytes per row) stay in L2.

Pipeline (per program, iteration of row ``r``; rows ``r + G``, ``r + 2G`` already in flight): issue the load
of row ``r + 3G`` (``EARLY_LOAD``; else after pass 1), first poll of row ``r``'s partials, pass 1 of row
``r + G`` and its publication, wait for row ``r``, pass 2 of row ``r`` and its store. ``PF`` = d > 0: the
chunk of row ``r + (3 + d) G`` is bulk-prefetched into L2 (``cp.async.bulk.prefetch.L2``) when row
``r + 3G``'s register load is issued. Forward options: ``DEPTH = 3``, one more row in registers (rows up to
``r + 3G`` in flight, ``r + 4G`` issued); ``SKEW = 2``, pass 1 and the publication two rows ahead of pass 2
(two rows wait for their partners at any time; 8 partial slots). ``HINT``: 1 streaming stores (``.cs``), 2
also ``evict_first`` loads. A row of one chunk (``SPLIT = 1``) is finished without any exchange. 16-bit
inputs of even width and row stride are read as int32 pairs (``PACKED``); other inputs (fp32, odd widths)
one element per lane, in chunks of half the columns (the same registers per chunk).

Exchange: the tagged words of :mod:`solkit.kernels.common.spin` (``(j + 1) << 32 | fp32 bits``,
relaxed atomic exchange; a program publishes row ``j + 1`` (``j + 2`` with ``SKEW = 2``) before it waits for
row ``j``: eight slots in the forward, four in the backward). Every
row is an arrival. The spin is bounded (``max_spins``); on a timeout a program either computes the row's
statistics from the whole row itself (``FALLBACK``: correct, slow; the CPU interpreter, whose programs run
one after another, takes this branch) or writes NaN for that row and never waits again (a visible failure,
never a hang). All programs of the grid must be resident at once: the launcher sizes the grid from the
compiled kernel's registers (:func:`~solkit.kernels.common.exchange.resident_programs`).
"""

from __future__ import annotations

import functools

import torch
import triton

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, device_caps
from solkit.kernels.common.device import interpreting, sm_count
from solkit.kernels.common.exchange import (
    bulk_prefetch_ok,
    chunk_layout,
    per_sm_for,
    resident_programs,
    resident_regs,
    tagged_slots,
)
from solkit.kernels.softmax.packed_kernels import softmax_bwd_packed_kernel, softmax_fwd_packed_kernel

_TUNED = tuned.load("softmax", "packed")
#: Launch defaults by direction (``configs.yaml``, entry ``packed``: what each key does); ``by_width`` keys change
#: for rows at least ``W`` wide.
PACKED_CONFIG = {"fwd": _TUNED["fwd"], "bwd": _TUNED["bwd"]}
#: When the packed path is the default (no path asked for): on a GPU for 16-bit inputs (fp32 keeps the other
#: paths) if ``default``, with the launch options of the first ``ranges`` entry ``(min_cols, max_cols, options)``
#: that holds the row width.
PACKED_DEFAULT = _TUNED["default"]


def default_packed_options(direction: str, n_cols: int, dtype: torch.dtype) -> dict | None:
    """:data:`PACKED_DEFAULT`'s launch options for rows of ``n_cols`` (``direction`` "fwd" or "bwd"), or None
    when the packed path is not the default there (fp32, narrow rows)."""
    cfg = PACKED_DEFAULT[direction]
    if not cfg["default"] or dtype not in (torch.bfloat16, torch.float16):
        return None
    for lo, hi, opts in cfg["ranges"]:
        if n_cols >= lo and (hi is None or n_cols <= hi):
            return dict(opts)
    return None


@functools.cache
def _measured(cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(_TUNED, cc)[1]


def packed_per_sm(caps: DeviceCaps, per_sm: int, num_warps: int) -> int:
    """Programs per SM: the tuned ``per_sm`` where measured, else derived from ``caps``' register file
    (:func:`~solkit.kernels.common.exchange.per_sm_for`)."""
    return per_sm_for(caps, _measured(caps.cc), per_sm, num_warps)


# ------------------------------------------------------------------------------------------------ launchers
_CAPACITY: dict = {}


def _packable(*ts: torch.Tensor) -> bool:
    """16-bit tensors that can be read as int32 words: even row length and row stride, 4-byte aligned."""
    return all(t.dtype in (torch.bfloat16, torch.float16) and t.shape[1] % 2 == 0 and t.stride(0) % 2 == 0
               and t.data_ptr() % 4 == 0 for t in ts)  # fmt: skip


def _units(t: torch.Tensor, packed: bool) -> tuple[torch.Tensor, int]:
    return (t.view(torch.int32), t.stride(0) // 2) if packed else (t, t.stride(0))


def _launch(kernel, args: list, meta: dict, n_rows: int, split: int, t: torch.Tensor, per_sm: int,
            groups: int | None, num_warps: int, interp: bool) -> dict | None:  # fmt: skip
    most = max(1, min(n_rows, groups or n_rows))
    if interp:
        n_groups = min(most, 4)
    else:
        key = (kernel.__name__, t.device.index, t.dtype, tuple(sorted(meta.items())))
        if key not in _CAPACITY:  # compile (no launch): the whole grid must be resident at once
            compiled = kernel.warmup(*args, grid=(1,), **meta)
            _CAPACITY[key] = resident_programs(compiled, num_warps, t.device)
        capacity, occ = _CAPACITY[key]
        n_groups = min(most, min(capacity, per_sm * sm_count(t))
                       // split)  # fmt: skip
        if n_groups < 1:
            return None
    kernel[(n_groups * split,)](*args, **meta)
    return {"split": split, "groups": n_groups, "programs": n_groups * split, **({} if interp else occ)}


def _layout(n_cols: int, block: int, per_sm: int, t: torch.Tensor, interp: bool, fill: int) -> tuple[int, int, int]:
    """:func:`chunk_layout`'s ``(split, chunk_cols, block)``; with ``fill``, the fewest chunks (at most a quarter
    more, none wider than ``block``) whose count divides the ``per_sm x SMs`` resident slots, so every slot runs
    a program: 128256 columns in 4096-column chunks take 33 chunks x 16 groups (528 programs on 132 SMs x 4),
    not 32 x 16 (512: 16 slots idle)."""
    split, chunk_cols, blk = chunk_layout(n_cols, block)
    slots = per_sm * (4 if interp else sm_count(t))
    if not fill or split < 2 or slots % split == 0:
        return split, chunk_cols, blk
    for s in range(split + 1, split + split // 4 + 1):
        cols = triton.cdiv(triton.cdiv(n_cols, s), 16) * 16
        if slots % s == 0 and triton.cdiv(n_cols, cols) == s:
            return s, cols, triton.next_power_of_2(cols)
    return split, chunk_cols, blk


def _fill(cfg: dict, fill: int | None) -> int:
    return cfg.get("fill", 0) if fill is None else fill


def _plan(t: torch.Tensor, packed: bool, block: int, per_sm: int, interp: bool, fill: int, groups: int | None,
          words: int) -> tuple[int, int, int, torch.Tensor]:  # fmt: skip
    """Both directions' launch plan: the row's chunk layout (16-bit rows that cannot be read as 32-bit words take
    half-size blocks: the same registers as packed) and the zeroed partials of the groups that run at once
    (``words`` tagged values per chunk: forward max, sum and the protocol's third word, unused here; backward one
    sum)."""
    n_rows, n_cols = t.shape
    blk_cols = block if packed else max(block // 2, 16)
    split, chunk_cols, blk = _layout(n_cols, blk_cols, per_sm, t, interp, fill)
    most = max(1, min(n_rows, groups or n_rows))
    partials = tagged_slots(
        most if interp else min(most, max(per_sm * sm_count(t) // split, 1)), split, words, t.device
    )
    return split, chunk_cols, blk, partials


def softmax_forward_packed(
    x: torch.Tensor, y: torch.Tensor, *, block: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, keep_e: int | None = None, early_load: int | None = None,
    l2_prefetch: int | None = None, maxnreg: int | None = None, max_spins: int = 1 << 20,
    groups: int | None = None, fallback: bool | None = None, depth: int | None = None, skew: int | None = None,
    hint: int | None = None, fill: int | None = None,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over rows of the 2-D ``x`` (unit column stride) into ``y``; returns the launch
    facts, or None (nothing launched) when one group does not fit on the GPU at once. Options left None
    come from :data:`PACKED_CONFIG` ``["fwd"]``; ``fallback`` defaults to True under the interpreter."""
    cfg = tuned.for_width(PACKED_CONFIG["fwd"], x.shape[1])
    caps = device_caps(x)
    block, num_warps = block or cfg["block"], num_warps or cfg["num_warps"]
    per_sm = per_sm or packed_per_sm(caps, cfg["per_sm"], num_warps)
    n_rows, n_cols = x.shape
    interp = x.device.type != "cuda" or interpreting()
    packed = _packable(x, y)
    split, chunk_cols, blk, partials = _plan(x, packed, block, per_sm, interp, _fill(cfg, fill), groups, words=3)
    xu, xu_stride = _units(x, packed)
    yu, yu_stride = _units(y, packed)
    pf = cfg["l2_prefetch"] if l2_prefetch is None else l2_prefetch
    aligned = x.data_ptr() % 16 == 0 and x.stride(0) % 8 == 0 and packed
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BLOCK=blk, PACKED=int(packed),
                IS_BF16=int(x.dtype == torch.bfloat16), KEEP_E=int(cfg["keep_e"] if keep_e is None else keep_e),
                EARLY_LOAD=int(cfg["early_load"] if early_load is None else early_load),
                PF=int(pf) if aligned and not interp and bulk_prefetch_ok(caps) else 0,
                FALLBACK=int(interp if fallback is None else fallback),
                ASM=int(not interp), DEPTH=int(depth or cfg.get("depth", 2)), SKEW=int(skew or cfg.get("skew", 1)),
                HINT=int(cfg.get("hint", 0) if hint is None else hint), num_warps=num_warps)  # fmt: skip
    if (meta["SKEW"], meta["DEPTH"]) not in ((1, 2), (1, 3), (2, 2)):
        raise SolkitError(f"softmax packed: (skew, depth) must be (1, 2), (1, 3) or (2, 2), got {meta['SKEW']}, "
                          f"{meta['DEPTH']}")  # fmt: skip
    if not interp:
        meta["maxnreg"] = maxnreg or resident_regs(per_sm, num_warps, caps.regs_per_sm)
    args = [x, xu, yu, partials, n_rows, n_cols, chunk_cols, x.stride(0), xu_stride, yu_stride,
            0 if interp else max_spins]  # fmt: skip
    return _launch(softmax_fwd_packed_kernel, args, meta, n_rows, split, x, per_sm, groups, num_warps, interp)


def softmax_backward_packed(
    dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, *, block: int | None = None, num_warps: int | None = None,
    per_sm: int | None = None, early_load: int | None = None, l2_prefetch: int | None = None,
    maxnreg: int | None = None, max_spins: int = 1 << 20, groups: int | None = None, fallback: bool | None = None,
    keep_e: int | None = None, depth: int | None = None, skew: int | None = None, hint: int | None = None,
    fill: int | None = None,
) -> dict | None:  # fmt: skip
    """``dx = y (dy - sum(y dy))`` over rows (2-D, unit column stride); as :func:`softmax_forward_packed`
    (``keep_e``, ``depth`` and ``skew``, forward options, are accepted and ignored, so one option dict serves
    both)."""
    cfg = tuned.for_width(PACKED_CONFIG["bwd"], y.shape[1])
    caps = device_caps(y)
    block, num_warps = block or cfg["block"], num_warps or cfg["num_warps"]
    per_sm = per_sm or packed_per_sm(caps, cfg["per_sm"], num_warps)
    n_rows, n_cols = y.shape
    interp = y.device.type != "cuda" or interpreting()
    packed = _packable(y, dy, dx)
    split, chunk_cols, blk, partials = _plan(y, packed, block, per_sm, interp, _fill(cfg, fill), groups, words=1)
    yu, yu_stride = _units(y, packed)
    du, du_stride = _units(dy, packed)
    dxu, dxu_stride = _units(dx, packed)
    pf = cfg["l2_prefetch"] if l2_prefetch is None else l2_prefetch
    aligned = packed and all(t.data_ptr() % 16 == 0 and t.stride(0) % 8 == 0 for t in (y, dy))
    meta = dict(SPLIT=split, SPLIT_P2=max(triton.next_power_of_2(split), 2), BLOCK=blk, PACKED=int(packed),
                IS_BF16=int(y.dtype == torch.bfloat16),
                EARLY_LOAD=int(cfg["early_load"] if early_load is None else early_load),
                PF=int(pf) if aligned and not interp and bulk_prefetch_ok(caps) else 0,
                FALLBACK=int(interp if fallback is None else fallback),
                ASM=int(not interp), HINT=int(cfg.get("hint", 0) if hint is None else hint),
                num_warps=num_warps)  # fmt: skip
    if not interp:
        meta["maxnreg"] = maxnreg or resident_regs(per_sm, num_warps, caps.regs_per_sm)
    args = [y, dy, yu, du, dxu, partials, n_rows, n_cols, chunk_cols, y.stride(0), dy.stride(0), yu_stride,
            du_stride, dxu_stride, 0 if interp else max_spins]  # fmt: skip
    return _launch(softmax_bwd_packed_kernel, args, meta, n_rows, split, y, per_sm, groups, num_warps, interp)
