"""The Triton read kernels of ``read_floor.py`` and their families: each sums the int32 words it reads into one
value per program (so the sums prove every word was read once), and ``launch`` runs one family by spec."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TMA_COLS = 128  # int32 words per TMA tile row (512 bytes)


# --------------------------------------------------------------------------------------------- kernels
@triton.jit
def _load(ptrs, live, CACHE: tl.constexpr):
    """A vector load of int32 words; CACHE 0 default, 1 .cg (L2 only), 2 evict_first."""
    mask = tl.full(ptrs.shape, True, tl.int1) & live
    if CACHE == 1:
        return tl.load(ptrs, mask=mask, other=0, cache_modifier=".cg")
    elif CACHE == 2:
        return tl.load(ptrs, mask=mask, other=0, eviction_policy="evict_first")
    else:
        return tl.load(ptrs, mask=mask, other=0)


@triton.jit
def _chunk_kernel(src, out, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CACHE: tl.constexpr):
    """Program p reads words [p * BLOCK * UNROLL, (p + 1) * BLOCK * UNROLL): UNROLL independent BLOCK-word
    loads (4 * BLOCK * UNROLL bytes), summed (int32, wrapping) into out[p]."""
    pid = tl.program_id(0)
    base = src + pid.to(tl.int64) * (BLOCK * UNROLL)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for u in tl.static_range(UNROLL):
        acc += _load(base + u * BLOCK + tl.arange(0, BLOCK), True, CACHE)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _persist_kernel(src, out, n_blocks, BLOCK: tl.constexpr, CACHE: tl.constexpr, SLAB: tl.constexpr):
    """Persistent over n_blocks blocks of BLOCK words: grid-stride (SLAB 0: at any moment the programs read
    neighbouring blocks) or one contiguous slab per program (SLAB 1: as many streams as programs, far
    apart). The next block's loads are issued before this block is summed (8 * BLOCK bytes in flight)."""
    pid = tl.program_id(0)
    if SLAB:
        per = tl.cdiv(n_blocks, tl.num_programs(0))
        first = pid * per
        last = tl.minimum(first + per, n_blocks)
        step = 1
    else:
        first = pid
        last = n_blocks
        step = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    nxt = _load(src + tl.minimum(first, n_blocks - 1).to(tl.int64) * BLOCK + offs, first < last, CACHE)
    for b in range(first, last, step):
        cur = nxt
        nb = b + step
        nxt = _load(src + tl.minimum(nb, n_blocks - 1).to(tl.int64) * BLOCK + offs, nb < last, CACHE)
        acc += cur
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _pipe_kernel(src, out, n_blocks, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Grid-stride over blocks of BLOCK words with Triton's software pipeliner: STAGES blocks in flight
    (cp.async into shared memory) per program."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for b in tl.range(pid, n_blocks, tl.num_programs(0), num_stages=STAGES):
        acc += tl.load(src + b * BLOCK + offs)  # < 2^31 words: int32 offsets do
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def _tma_kernel(desc, out, n_tiles, TILES: tl.constexpr, ROWS: tl.constexpr, STAGES: tl.constexpr):
    """TMA tiles of [ROWS, 128] int32 (512 * ROWS bytes) into shared memory, STAGES in flight. TILES 0:
    persistent grid-stride over n_tiles; TILES > 0: program p reads tiles [p * TILES, (p + 1) * TILES)."""
    pid = tl.program_id(0)
    acc = tl.zeros([ROWS, 128], dtype=tl.int32)
    if TILES == 0:
        for t in tl.range(pid, n_tiles, tl.num_programs(0), num_stages=STAGES):
            acc += desc.load([t * ROWS, 0])
    else:
        for t in tl.range(pid * TILES, pid * TILES + TILES, num_stages=STAGES):
            acc += desc.load([t * ROWS, 0])
    tl.store(out + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


@triton.jit
def _rows_kernel(src, out, row_words, ROWS: tl.constexpr, BK: tl.constexpr):
    """The decode GEMV's access pattern without its arithmetic: program p reads rows [p * ROWS, (p + 1) * ROWS)
    of a row-major [n_rows, row_words] matrix in [ROWS, BK] blocks, the next block's loads in flight while this
    block is summed."""
    pid = tl.program_id(0)
    ptrs = src + (pid * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None] * row_words + tl.arange(0, BK)[None, :]
    acc = tl.zeros([ROWS, BK], dtype=tl.int32)
    nxt = _load(ptrs, True, 0)
    for k in range(0, row_words, BK):
        cur = nxt
        ptrs += BK
        nxt = _load(ptrs, k + BK < row_words, 0)
        acc += cur
    tl.store(out + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


@triton.jit
def _gemv_rows_kernel(w_ptr, x_ptr, y_ptr, K: tl.constexpr, ROWS: tl.constexpr, BK: tl.constexpr, NO_X: tl.constexpr):
    """y[rows] = W[rows, :] @ x (bf16 in, fp32 out) for ROWS rows per program, every block of the K walk loaded
    before the first product (K * ROWS * 2 bytes of W in flight: one round trip per program). NO_X: the row
    sums of W instead (no x loads: what x's 8 KB per program cost)."""
    pid = tl.program_id(0)
    rows = (pid * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    offs_k = tl.arange(0, BK)
    part = tl.zeros([ROWS, BK], dtype=tl.float32)
    for kb in tl.static_range(K // BK):
        w = tl.load(w_ptr + rows[:, None] * K + kb * BK + offs_k[None, :])
        if NO_X:
            part += w.to(tl.float32)
        else:
            part += w.to(tl.float32) * tl.load(x_ptr + kb * BK + offs_k).to(tl.float32)[None, :]
    tl.store(y_ptr + rows, tl.sum(part, axis=1))


@triton.jit
def _gemv_persist_kernel(w_ptr, x_ptr, y_ptr, n_tiles, K: tl.constexpr, ROWS: tl.constexpr, BK: tl.constexpr):
    """The same GEMV, persistent: program p takes row tiles p, p + G, ...; the (tile, K block) sequence is one
    stream with the next block's loads in flight across tile boundaries (the epilogue does not stall it)."""
    NK: tl.constexpr = K // BK
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    total = tl.cdiv(n_tiles - pid, step) * NK
    offs_r = tl.arange(0, ROWS)
    offs_k = tl.arange(0, BK)
    live = tl.full([ROWS, BK], True, tl.int1)
    nxt = tl.load(w_ptr + (pid * ROWS + offs_r).to(tl.int64)[:, None] * K + offs_k[None, :], mask=live & (total > 0))
    part = tl.zeros([ROWS, BK], dtype=tl.float32)
    x_row = tl.load(x_ptr + offs_k).to(tl.float32)  # whole rows (NK 1): x once, kept in registers
    for i in range(0, total):
        cur = nxt
        j = i + 1
        tile_j = tl.minimum(pid + (j // NK) * step, n_tiles - 1)
        rows_j = (tile_j * ROWS + offs_r).to(tl.int64)
        nxt = tl.load(w_ptr + rows_j[:, None] * K + (j % NK) * BK + offs_k[None, :], mask=live & (j < total))
        kb = i % NK
        if NK == 1:
            part += cur.to(tl.float32) * x_row[None, :]
        else:
            part += cur.to(tl.float32) * tl.load(x_ptr + kb * BK + offs_k).to(tl.float32)[None, :]
        if kb == NK - 1:
            tile = pid + (i // NK) * step
            tl.store(y_ptr + tile * ROWS + offs_r, tl.sum(part, axis=1))
            part = tl.zeros([ROWS, BK], dtype=tl.float32)


@triton.jit
def _empty_kernel(out):
    """Reads nothing: one store per program (the span of a launch alone)."""
    tl.store(out + tl.program_id(0), tl.program_id(0))


# --------------------------------------------------------------------------------------------- families
def triton_families(sms: int) -> dict[str, dict[str, Any]]:
    """Name -> spec of the Triton read kernels (kind and compile-time parameters)."""
    f: dict[str, dict[str, Any]] = {}
    for block, unroll, warps in ((2048, 1, 4), (4096, 1, 4), (4096, 2, 4), (4096, 2, 8), (4096, 4, 8), (8192, 2, 8)):
        kb = 4 * block * unroll // 1024
        f[f"chunk {kb}KB b{block}x{unroll} w{warps}"] = dict(kind="chunk", BLOCK=block, UNROLL=unroll, CACHE=0,
                                                              num_warps=warps)  # fmt: skip
    for cache, tag in ((1, ".cg"), (2, "evict_first")):  # (.cg with evict_first: ptxas rejects the pair)
        f[f"chunk 32KB b4096x2 w4 {tag}"] = dict(kind="chunk", BLOCK=4096, UNROLL=2, CACHE=cache, num_warps=4)
    for ctas, block, warps in ((1, 8192, 8), (2, 4096, 8), (4, 4096, 4), (8, 2048, 4)):
        f[f"persist {ctas}/SM b{block} w{warps}"] = dict(kind="persist", BLOCK=block, CACHE=0, num_warps=warps,
                                                         programs=ctas * sms)  # fmt: skip
    f["persist slab 1/SM b8192 w8"] = dict(kind="persist", BLOCK=8192, CACHE=0, SLAB=1, num_warps=8, programs=sms)
    f["persist slab 4/SM b4096 w4"] = dict(kind="persist", BLOCK=4096, CACHE=0, SLAB=1, num_warps=4, programs=4 * sms)
    f["persist 4/SM b4096 w4 .cg"] = dict(kind="persist", BLOCK=4096, CACHE=1, num_warps=4, programs=4 * sms)
    for ctas, block, stages, warps in ((1, 4096, 4, 8), (2, 2048, 4, 4), (4, 1024, 6, 4)):
        f[f"pipe {ctas}/SM b{block} st{stages} w{warps}"] = dict(kind="pipe", BLOCK=block, STAGES=stages,
                                                                 num_warps=warps, programs=ctas * sms)  # fmt: skip
    for ctas, rows, stages, warps in ((1, 64, 3, 4), (2, 32, 3, 4), (2, 16, 6, 4), (4, 16, 3, 4)):
        f[f"tma persist {ctas}/SM {rows * 512 // 1024}KBx{stages} w{warps}"] = dict(
            kind="tma", TILES=0, ROWS=rows, STAGES=stages, num_warps=warps, programs=ctas * sms
        )
    for tiles, rows, stages in ((4, 32, 4), (8, 16, 4), (2, 64, 2)):
        f[f"tma chunk {tiles}x{rows * 512 // 1024}KB st{stages} w4"] = dict(kind="tma", TILES=tiles, ROWS=rows,
                                                                             STAGES=stages, num_warps=4)  # fmt: skip
    # the 1-row decode GEMV's pattern (rows of K = 4096 bf16 = 2048 words; 4 rows, 1024 bf16 per block)
    f["rows 4x2048w b512w w4 (GEMV pattern)"] = dict(kind="rows", ROWS=4, BK=512, num_warps=4)
    f["rows 2x2048w b1024w w4"] = dict(kind="rows", ROWS=2, BK=1024, num_warps=4)
    # GEMVs (y = W @ x, W the buffer as bf16 [N, 4096], fp32 y, no residual): one round trip per program, or
    # persistent with the stream running across row tiles
    for rows, bk, warps in ((1, 4096, 4), (2, 4096, 4), (4, 2048, 8)):
        f[f"gemv rows {rows}x4096 b{bk} w{warps}"] = dict(kind="gemv_rows", ROWS=rows, BK=bk, num_warps=warps)
    f["gemv rows 1x4096 b4096 w4 NO x (W row sums)"] = dict(kind="gemv_rows", ROWS=1, BK=4096, num_warps=4, NO_X=1)
    for ctas, rows, bk, warps in ((4, 4, 1024, 4), (8, 2, 1024, 4), (2, 8, 1024, 8), (8, 1, 4096, 4), (4, 2, 4096, 4),
                                  (4, 2, 4096, 8)):  # fmt: skip
        f[f"gemv persist {ctas}/SM {rows}x{bk} w{warps}"] = dict(kind="gemv_persist", ROWS=rows, BK=bk, num_warps=warps,
                                                                 programs=ctas * sms)  # fmt: skip
    f["empty (no reads) 4/SM"] = dict(kind="empty", num_warps=4, programs=4 * sms)
    f["empty (no reads) 1 program"] = dict(kind="empty", num_warps=4, programs=1)
    f["empty (no reads) 4096 programs"] = dict(kind="empty", num_warps=4, programs=4096)
    return f


def launch(spec: dict[str, Any], words: torch.Tensor, out: torch.Tensor) -> int:
    """Run one Triton family over ``words`` (int32); returns the number of programs (outputs written) and
    keeps the compiled kernel's resource use in ``spec["_res"]`` (first launch)."""
    n = words.numel()
    kind, warps = spec["kind"], spec["num_warps"]
    if kind == "chunk":
        per = spec["BLOCK"] * spec["UNROLL"]
        grid = n // per
        k = _chunk_kernel[(grid,)](words, out, BLOCK=spec["BLOCK"], UNROLL=spec["UNROLL"], CACHE=spec["CACHE"],
                               num_warps=warps, num_stages=1)  # fmt: skip
    elif kind == "persist":
        grid = min(spec["programs"], n // spec["BLOCK"])
        k = _persist_kernel[(grid,)](words, out, n // spec["BLOCK"], BLOCK=spec["BLOCK"], CACHE=spec["CACHE"],
                                     SLAB=spec.get("SLAB", 0), num_warps=warps, num_stages=1)  # fmt: skip
    elif kind == "pipe":
        grid = min(spec["programs"], n // spec["BLOCK"])
        k = _pipe_kernel[(grid,)](words, out, n // spec["BLOCK"], BLOCK=spec["BLOCK"], STAGES=spec["STAGES"],
                              num_warps=warps, num_stages=1)  # fmt: skip
    elif kind == "tma":
        rows = n // TMA_COLS
        desc = spec.setdefault("_desc", {}).get(words.data_ptr())
        if desc is None or desc.shape[0] != rows:
            desc = TensorDescriptor(words, [rows, TMA_COLS], [TMA_COLS, 1], [spec["ROWS"], TMA_COLS])
            spec["_desc"][words.data_ptr()] = desc
        n_tiles = rows // spec["ROWS"]
        grid = min(spec["programs"], n_tiles) if spec["TILES"] == 0 else n_tiles // spec["TILES"]
        k = _tma_kernel[(grid,)](desc, out, n_tiles, TILES=spec["TILES"], ROWS=spec["ROWS"], STAGES=spec["STAGES"],
                             num_warps=warps, num_stages=1)  # fmt: skip
    elif kind in ("gemv_rows", "gemv_persist"):
        w = words.view(torch.bfloat16).view(-1, 4096)
        x = _gemv_x(words.device)
        y = out.view(torch.float32)
        if kind == "gemv_rows":
            grid = w.shape[0] // spec["ROWS"]
            k = _gemv_rows_kernel[(grid,)](w, x, y, K=4096, ROWS=spec["ROWS"], BK=spec["BK"], NO_X=spec.get("NO_X", 0),
                                           num_warps=warps,
                                           num_stages=1)  # fmt: skip
        else:
            n_tiles = w.shape[0] // spec["ROWS"]
            grid = min(spec["programs"], n_tiles)
            k = _gemv_persist_kernel[(grid,)](w, x, y, n_tiles, K=4096, ROWS=spec["ROWS"], BK=spec["BK"],
                                              num_warps=warps, num_stages=1)  # fmt: skip
        grid = w.shape[0]  # outputs written
    elif kind == "rows":
        grid = n // (2048 * spec["ROWS"])
        k = _rows_kernel[(grid,)](words, out, 2048, ROWS=spec["ROWS"], BK=spec["BK"], num_warps=warps, num_stages=1)
    else:
        grid = spec["programs"]
        k = _empty_kernel[(grid,)](out, num_warps=warps, num_stages=1)
    if "_res" not in spec and k is not None and hasattr(k, "n_regs"):
        spec["_res"] = {"regs": k.n_regs, "spills": k.n_spills, "shared": getattr(k.metadata, "shared", None)}
    return grid


_X: dict[str, torch.Tensor] = {}


def _gemv_x(device: torch.device) -> torch.Tensor:
    """The GEMV families' x: one fixed random bf16 vector of 4096 per device."""
    if str(device) not in _X:
        g = torch.Generator(device=device).manual_seed(11)
        _X[str(device)] = torch.randn(4096, device=device, dtype=torch.bfloat16, generator=g)
    return _X[str(device)]
