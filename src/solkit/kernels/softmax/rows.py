"""Whole-row softmax forward for 16-bit rows held in registers as exact tiles: no masked lanes.

Math, per row ``x`` of ``N`` columns (fp32 arithmetic, base-2 exponentials, ``L = log2 e``):

    m = max x,   e = 2^((x - m) L),   s = sum e,   y = e / s

The row is read as int32 words (two 16-bit values each) and cut into up to three pieces of ``R_i x U`` words,
``U = 32 * VEC * num_warps`` (``VEC`` words, 16 or 8 bytes, per thread per tile row) and ``R_i`` powers of two:
14336 columns at 8 warps and ``VEC = 4`` (or 16 warps and ``VEC = 2``) are ``(4 + 2 + 1) x 1024`` words, where
one power-of-two tile would be 16384 columns with an eighth of its lanes masked (their loads, exponentials and
reductions wasted). A ``[R, U]`` tile puts its ``R`` rows in the same thread's registers (Triton's default
layout for such a load; ``VEC = 2`` caps the contiguity Triton sees with ``tl.max_contiguous``), so the three
pieces reduce to one ``[U]`` vector inside each thread and the row still takes one block reduction for the max
and one for the sum. Pass 1 keeps the exponentials as 16-bit pairs (bf16 for bf16 inputs: pass 2 is one
``fma.rn.bf16x2`` per pair, ``y = e * (1 / s)``; f16 otherwise, unpacked and multiplied); ``y`` is stored
with ``.cs`` (``HINT`` >= 1; 2 also loads ``evict_first``).

Persistent programs (``per_sm`` per SM) walk rows ``p, p + G, ...``; the loads of the next ``DEPTH`` rows are
in registers, in flight, while a row is reduced and stored, and ``PF`` > 0 bulk-prefetches the row ``DEPTH
+ PF`` ahead into L2 (``cp.async.bulk.prefetch.L2``). No program waits for another (rows are whole), so the
grid need not be resident at once. Rows past the last are loaded clamped to the last row and never stored.

Bytes per call, ``M x N`` of ``e`` bytes: read ``M N e``, write ``M N e``.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, device_caps
from solkit.kernels.common.device import interpreting, sm_count
from solkit.kernels.common.exchange import (
    L2E,
    bulk_prefetch_ok,
    pack,
    per_sm_for,
    prefetch_rows,
    resident_regs,
    unpack,
)

_TUNED = tuned.load("softmax", "rows")
#: Launch defaults (``configs.yaml``, entry ``rows``): warps, resident programs per SM, rows in flight (1-4), L2
#: prefetch rows ahead of them, cache hints, kept exponentials (2: bf16 pairs for bf16 inputs; f16 pairs
#: otherwise), words per thread and vector (``vec`` 4: 16-byte loads, tiles of ``128 num_warps`` words; 2: 8-byte
#: loads, ``64 num_warps``).
ROWS_CONFIG = _TUNED["config"]
#: When no path is asked for: the rows path on a GPU for 16-bit inputs whose width lies in one of ``ranges``
#: ``(min_cols, max_cols, options)`` (and tiles exactly; else the next path).
ROWS_DEFAULT = {"ranges": _TUNED["ranges"]}


@functools.cache
def _measured(cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(_TUNED, cc)[1]


def rows_per_sm(caps: DeviceCaps, per_sm: int, num_warps: int) -> int:
    """Programs per SM: the tuned ``per_sm`` where measured, else derived from ``caps``' register file
    (:func:`~solkit.kernels.common.exchange.per_sm_for`)."""
    return per_sm_for(caps, _measured(caps.cc), per_sm, num_warps)


def row_pieces(n_cols: int, num_warps: int, vec: int = 4) -> tuple[int, int, int] | None:
    """``(R0, R1, R2)`` tile rows (powers of two, descending, 0 = no piece) covering a row of ``n_cols`` 16-bit
    columns exactly with tiles of ``32 * vec * num_warps`` words, or None when no three such pieces do."""
    unit = 64 * vec * num_warps  # columns per tile row
    if n_cols % unit:
        return None
    k = n_cols // unit
    bits = [1 << i for i in range(k.bit_length() - 1, -1, -1) if k >> i & 1]
    if len(bits) > 3:
        return None
    return tuple(bits + [0] * (3 - len(bits)))  # type: ignore[return-value]


@triton.jit
def _tile_offsets(OFF: tl.constexpr, R: tl.constexpr, U: tl.constexpr, VEC: tl.constexpr):
    """Word offsets of a ``[R, U]`` tile; ``VEC`` (< 4) caps the contiguity Triton sees, so its default layout
    gives each thread ``VEC``-word vectors along a tile row (``U = 32 VEC num_warps``) and the tile rows stay in
    the thread's registers."""
    offs = OFF + tl.arange(0, R)[:, None] * U + tl.arange(0, U)[None, :]
    if VEC < 4:
        offs = tl.max_contiguous(offs, [1, VEC])
    return offs


@triton.jit
def _ld(ptrs, HINT: tl.constexpr):
    if HINT >= 2:
        return tl.load(ptrs, eviction_policy="evict_first")
    else:
        return tl.load(ptrs)


@triton.jit
def _load_row(xu_ptr, row, n_rows, stride, R0: tl.constexpr, R1: tl.constexpr, R2: tl.constexpr,
              U: tl.constexpr, HINT: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    """The row's pieces (a row past the last reads the last row: no mask, never stored); absent pieces are 0."""
    base = xu_ptr + tl.cast(tl.minimum(row, n_rows - 1), tl.int64) * stride
    a = _ld(base + _tile_offsets(0, R0, U, VEC), HINT)
    b = 0
    c = 0
    if R1 > 0:
        b = _ld(base + _tile_offsets(R0 * U, R1, U, VEC), HINT)
    if R2 > 0:
        c = _ld(base + _tile_offsets((R0 + R1) * U, R2, U, VEC), HINT)
    return a, b, c


@triton.jit
def _piece_max(w, IS_BF16: tl.constexpr):
    lo, hi = unpack(w, IS_BF16)
    return tl.max(tl.maximum(lo, hi), axis=0)  # over the tile rows: inside each thread


@triton.jit
def _piece_exp(w, m2, IS_BF16: tl.constexpr, E_BF16: tl.constexpr, ASM: tl.constexpr):
    """(per-column sums of ``2^(x L - m2)``, the exponentials packed as 16-bit pairs)."""
    lo, hi = unpack(w, IS_BF16)
    e_lo = tl.exp2(lo * L2E - m2)
    e_hi = tl.exp2(hi * L2E - m2)
    return tl.sum(e_lo + e_hi, axis=0), pack(e_lo, e_hi, E_BF16, ASM)


@triton.jit
def _piece_out(e, inv, IS_BF16: tl.constexpr, E_BF16: tl.constexpr, ASM: tl.constexpr):
    """Output words ``e * inv`` of a piece's kept exponentials."""
    if E_BF16 and ASM:
        cw = tl.broadcast_to(pack(inv, inv, True, ASM), e.shape)
        zw = tl.full(e.shape, -2147450880, tl.int32)  # (-0.0, -0.0) as bf16 pairs: e * c + (-0) = e * c
        return tl.inline_asm_elementwise("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r", [e, cw, zw], dtype=tl.int32,
                                         is_pure=True, pack=1)  # fmt: skip
    else:
        e_lo, e_hi = unpack(e, E_BF16)
        return pack(e_lo * inv, e_hi * inv, IS_BF16, ASM)


@triton.jit
def _st(ptrs, v, HINT: tl.constexpr):
    if HINT >= 1:
        tl.store(ptrs, v, cache_modifier=".cs")
    else:
        tl.store(ptrs, v)


@triton.jit
def _softmax_row(a, b, c, yu_ptr, row, n_rows, y_stride, R0: tl.constexpr, R1: tl.constexpr, R2: tl.constexpr,
                 U: tl.constexpr, IS_BF16: tl.constexpr, E_BF16: tl.constexpr, ASM: tl.constexpr,
                 HINT: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    """Pass 1 (max, exponentials, sum: two block reductions) and pass 2 (scale, store) of one row."""
    mv = _piece_max(a, IS_BF16)
    if R1 > 0:
        mv = tl.maximum(mv, _piece_max(b, IS_BF16))
    if R2 > 0:
        mv = tl.maximum(mv, _piece_max(c, IS_BF16))
    m = tl.max(mv, axis=0)
    m2 = tl.where(m == -float("inf"), 0.0, m) * L2E
    sv, ea = _piece_exp(a, m2, IS_BF16, E_BF16, ASM)
    eb = 0
    ec = 0
    if R1 > 0:
        sb, eb = _piece_exp(b, m2, IS_BF16, E_BF16, ASM)
        sv += sb
    if R2 > 0:
        sc, ec = _piece_exp(c, m2, IS_BF16, E_BF16, ASM)
        sv += sc
    inv = 1.0 / tl.sum(sv, axis=0)
    if row < n_rows:
        base = yu_ptr + tl.cast(row, tl.int64) * y_stride
        dt = yu_ptr.dtype.element_ty
        _st(base + _tile_offsets(0, R0, U, VEC), _piece_out(ea, inv, IS_BF16, E_BF16, ASM).to(dt), HINT)
        if R1 > 0:
            _st(base + _tile_offsets(R0 * U, R1, U, VEC), _piece_out(eb, inv, IS_BF16, E_BF16, ASM).to(dt), HINT)
        if R2 > 0:
            _st(base + _tile_offsets((R0 + R1) * U, R2, U, VEC), _piece_out(ec, inv, IS_BF16, E_BF16, ASM).to(dt), HINT)


@triton.jit
def _softmax_fwd_rows_kernel(
    xu_ptr, yu_ptr, n_rows, x_stride, y_stride, R0: tl.constexpr, R1: tl.constexpr, R2: tl.constexpr,
    U: tl.constexpr, IS_BF16: tl.constexpr, E_BF16: tl.constexpr, ASM: tl.constexpr, DEPTH: tl.constexpr,
    PF: tl.constexpr, HINT: tl.constexpr, VEC: tl.constexpr = 4,
):  # fmt: skip
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    pf_bytes = (R0 + R1 + R2) * U * 4
    a1, b1, c1 = _load_row(xu_ptr, pid, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
    if DEPTH >= 2:
        a2, b2, c2 = _load_row(xu_ptr, pid + step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
    if DEPTH >= 3:
        a3, b3, c3 = _load_row(xu_ptr, pid + 2 * step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
    if DEPTH >= 4:
        a4, b4, c4 = _load_row(xu_ptr, pid + 3 * step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
    if PF > 0:
        prefetch_rows(xu_ptr, pid + DEPTH * step, PF, step, n_rows, x_stride, 0, pf_bytes)
    for row in tl.range(pid, n_rows, step):
        a0, b0, c0 = a1, b1, c1
        if DEPTH == 1:
            a1, b1, c1 = _load_row(xu_ptr, row + step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
        elif DEPTH == 2:
            a1, b1, c1 = a2, b2, c2
            a2, b2, c2 = _load_row(xu_ptr, row + 2 * step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
        elif DEPTH == 3:
            a1, b1, c1 = a2, b2, c2
            a2, b2, c2 = a3, b3, c3
            a3, b3, c3 = _load_row(xu_ptr, row + 3 * step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
        else:
            a1, b1, c1 = a2, b2, c2
            a2, b2, c2 = a3, b3, c3
            a3, b3, c3 = a4, b4, c4
            a4, b4, c4 = _load_row(xu_ptr, row + 4 * step, n_rows, x_stride, R0, R1, R2, U, HINT, VEC)
        if PF > 0:
            prefetch_rows(xu_ptr, row + (DEPTH + PF) * step, 1, step, n_rows, x_stride, 0, pf_bytes)
        _softmax_row(a0, b0, c0, yu_ptr, row, n_rows, y_stride, R0, R1, R2, U, IS_BF16, E_BF16, ASM, HINT, VEC)


def rows_plan(x: torch.Tensor, y: torch.Tensor, num_warps: int, vec: int = 4) -> tuple[int, int, int] | None:
    """The pieces of :func:`row_pieces` when ``x`` and ``y`` can take this path (16-bit, 2-D, unit column
    stride, rows exactly tiled, 16-byte aligned rows), else None."""
    if x.dtype not in (torch.bfloat16, torch.float16) or y.dtype != x.dtype or x.dim() != 2:
        return None
    for t in (x, y):
        if t.stride(1) != 1 or t.stride(0) % 8 or t.data_ptr() % 16:
            return None
    return row_pieces(x.shape[1], num_warps, vec)


def softmax_forward_rows(
    x: torch.Tensor, y: torch.Tensor, *, num_warps: int | None = None, per_sm: int | None = None,
    depth: int | None = None, l2_prefetch: int | None = None, hint: int | None = None, keep_e: int | None = None,
    maxnreg: int | None = None, sms: int | None = None, programs: int | None = None, vec: int | None = None,
) -> dict | None:  # fmt: skip
    """``y = softmax(x)`` over the rows of the 2-D 16-bit ``x``; returns the launch facts, or None (nothing
    launched) when the rows are not exactly tiled (:func:`rows_plan`). Options left None: :data:`ROWS_CONFIG`;
    ``programs`` caps the grid (else ``per_sm`` x SMs)."""
    cfg = ROWS_CONFIG
    nw = num_warps or cfg["num_warps"]
    vec = int(vec or cfg["vec"])
    pieces = rows_plan(x, y, nw, vec)
    if pieces is None or x.shape[0] == 0:
        return None
    caps = device_caps(x)
    per_sm = per_sm or rows_per_sm(caps, cfg["per_sm"], nw)
    depth = int(depth or cfg["depth"])
    if depth not in (1, 2, 3, 4):
        raise SolkitError(f"softmax rows: depth must be 1 to 4, got {depth}")
    interp = x.device.type != "cuda" or interpreting()
    n_sms = sms or (4 if interp else sm_count(x))
    grid = max(1, min(x.shape[0], programs or per_sm * n_sms))
    is_bf16 = x.dtype == torch.bfloat16
    keep = cfg["keep_e"] if keep_e is None else keep_e
    pf = cfg["l2_prefetch"] if l2_prefetch is None else l2_prefetch
    meta = dict(R0=pieces[0], R1=pieces[1], R2=pieces[2], U=32 * vec * nw, VEC=vec, IS_BF16=int(is_bf16),
                E_BF16=int(keep == 2 and is_bf16), ASM=int(not interp), DEPTH=depth,
                PF=0 if interp or not bulk_prefetch_ok(caps) else int(pf),
                HINT=int(cfg["hint"] if hint is None else hint), num_warps=nw)  # fmt: skip
    if not interp:
        meta["maxnreg"] = maxnreg or resident_regs(per_sm, nw, caps.regs_per_sm)
    k = _softmax_fwd_rows_kernel[(grid,)](x.view(torch.int32), y.view(torch.int32), x.shape[0], x.stride(0) // 2,
                                          y.stride(0) // 2, **meta)  # fmt: skip
    facts = {"path": "rows", "pieces": pieces, "programs": grid, "depth": depth, "num_warps": nw, "vec": vec}
    if not interp and k is not None:
        facts.update(n_regs=int(getattr(k, "n_regs", -1)), n_spills=int(getattr(k, "n_spills", -1)))
    return facts
