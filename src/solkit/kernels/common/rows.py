"""Row-kernel helpers shared by the norms, softmax, gates and losses.

* :func:`check_rows` validates a floating tensor and flattens it to ``[rows, cols]`` with unit stride
  along the last dimension (the layout every row kernel expects);
* :func:`row_config` and :func:`warps_for` pick the tile (``BLOCK_M`` rows by ``BLOCK_N`` columns)
  and warps so each thread holds about 32 bytes of every streamed tensor: enough independent 16-byte
  loads in flight per SM to cover HBM latency, few enough registers for several programs per SM;
* :func:`sum_partials` reduces the ``[programs, K]`` fp32 buffer of per-program partial sums that
  the backward kernels write (dW, dB): a two-stage reduction instead of an atomics storm.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.device import sm_count

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


MAX_BLOCK_COLS = 65536


def warps_for(tile_elems: int, elem_bytes: int, *, bytes_per_thread: int = 32) -> int:
    """Warps (a power of two in [1, 32]) so each thread holds about ``bytes_per_thread`` of the tile."""
    warps = max(tile_elems * elem_bytes // (32 * bytes_per_thread), 1)
    return int(min(triton.next_power_of_2(warps), 32))


def row_config(n_cols: int, elem_bytes: int, *, min_tile: int = 2048) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, num_warps)`` for a kernel that keeps whole rows in registers.

    Narrow rows are stacked ``BLOCK_M`` to a program so that one program still streams at least
    ``min_tile`` elements per tensor.
    """
    block_n = triton.next_power_of_2(n_cols)
    block_m = int(min(max(min_tile // block_n, 1), 64))
    return block_m, block_n, max(warps_for(block_m * block_n, elem_bytes), 4)


def check_rows(x: torch.Tensor, name: str, *, max_cols: int | None = MAX_BLOCK_COLS) -> torch.Tensor:
    """Check a float tensor with at least one dimension and return it as a 2-D ``[rows, cols]`` view/copy."""
    if not isinstance(x, torch.Tensor):
        raise SolkitError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise SolkitError(f"{name}: dtype {x.dtype} not supported; allowed: float32, float16, bfloat16")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise SolkitError(f"{name}: needs at least one dimension with a non-zero last size, got shape {tuple(x.shape)}")
    if max_cols is not None and x.shape[-1] > max_cols:
        raise SolkitError(f"{name}: last dimension {x.shape[-1]} exceeds the supported maximum {max_cols}")
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    return x2


def check_weight(w: torch.Tensor | None, n_cols: int, name: str, device: torch.device) -> None:
    """A per-column parameter must be 1-D of length ``n_cols``, float, on the activations' device."""
    if w is None:
        return
    if w.dim() != 1 or w.shape[0] != n_cols:
        raise SolkitError(f"{name}: expected shape ({n_cols},), got {tuple(w.shape)}")
    if w.dtype not in FLOAT_DTYPES:
        raise SolkitError(f"{name}: dtype {w.dtype} not supported; allowed: float32, float16, bfloat16")
    if w.device != device:
        raise SolkitError(f"{name}: on {w.device}, but the activations are on {device}")


def backward_programs(n_row_blocks: int, t: torch.Tensor, per_sm: int = 2) -> int:
    """Programs of a persistent backward kernel: a few per SM, never more than there are row blocks."""
    return max(min(n_row_blocks, per_sm * sm_count(t)), 1)


def backward_warps(tile_elems: int, elem_bytes: int) -> int:
    """Warps of a persistent backward program: ~16 bytes per thread per streamed tensor, 4 to 16 warps."""
    return int(min(max(warps_for(tile_elems, elem_bytes, bytes_per_thread=16), 4), 16))


def register_cap(programs_per_sm: int, num_warps: int) -> int:
    """Registers per thread that let ``programs_per_sm`` programs share an SM's 64K registers.

    A persistent grid assumes every program is resident at once; a program that needed more
    registers would push some programs into a second wave and double the tail.
    """
    cap = 65536 // (max(programs_per_sm, 1) * num_warps * 32) // 8 * 8
    return int(min(max(cap, 32), 255))


def grown_scratch(cache: dict[str, list[torch.Tensor]], outgrown: list[torch.Tensor], device: torch.device,
                  floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """fp32 partials and zeroed int32 counters (which kernels leave at zero), one pair per device, grown
    to the largest need seen and never shrunk. A pair that is outgrown is kept in ``outgrown``: a CUDA
    graph captured earlier may still point at it."""
    key = str(device)
    have = cache.get(key)
    if have is None or have[0].numel() < floats or have[1].numel() < counters:
        if have is not None:
            outgrown.extend(have)
        floats = max(floats, have[0].numel() if have else 0)
        counters = max(counters, have[1].numel() if have else 0)
        have = [
            torch.empty(floats, dtype=torch.float32, device=device),
            torch.zeros(counters, dtype=torch.int32, device=device),
        ]
        cache[key] = have
    return have[0], have[1]


@triton.jit
def load_tile(ptr, rows, stride, cols, n_rows, n_cols):
    """A ``[BLOCK_M, BLOCK_N]`` tile of a row-major matrix in its own dtype, zero outside it; int64 row
    offsets. Kept unconverted so a prefetched tile holds half the registers of an fp32 copy."""
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return tl.load(ptr + rows.to(tl.int64)[:, None] * stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def load_tile_fp32(ptr, rows, stride, cols, n_rows, n_cols):
    """:func:`load_tile` converted to fp32."""
    return load_tile(ptr, rows, stride, cols, n_rows, n_cols).to(tl.float32)


@triton.jit
def _sum_partials_kernel(
    partial_ptr, out_ptr, n_partials, n_cols, row_stride, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr
):  # fmt: skip
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for p0 in range(0, n_partials, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        mask = (rows < n_partials)[:, None] & col_mask[None, :]
        acc += tl.load(partial_ptr + rows[:, None] * row_stride + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)


def sum_partials(
    partial: torch.Tensor,
    out_dtype: torch.dtype,
    *,
    block_p: int = 32,
    block_c: int | None = None,
    num_warps: int = 4,
) -> torch.Tensor:
    """Column sums of an fp32 ``[P, K]`` buffer (unit column stride), accumulated in fp32, as ``out_dtype``.

    Each program sums ``block_c`` columns, ``block_p`` partial rows per (dependent) loop step."""
    n_partials, n_cols = partial.shape
    if partial.stride(1) != 1:
        partial = partial.contiguous()
    out = torch.empty(n_cols, dtype=out_dtype, device=partial.device)
    block_c = block_c or (32 if n_cols <= 8192 else 64)
    grid = (triton.cdiv(n_cols, block_c),)
    _sum_partials_kernel[grid](
        partial, out, n_partials, n_cols, partial.stride(0), BLOCK_P=block_p, BLOCK_C=block_c, num_warps=num_warps
    )
    return out
