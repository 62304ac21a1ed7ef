"""Embedding lookup (a row gather) and its backward (a scatter-add of output-gradient rows by id, ids repeating).

Forward: ``out[t] = weight[ids[t]]``. One program copies a ``block_h`` slice of one row.
Bytes: ids ``8 T`` + rows read ``e T H`` + rows written ``e T H`` (``e`` bytes per element); the table is
never read whole.

Backward: ``dW[v] = sum over t with ids[t] == v of dY[t]`` (the dense gradient ``[V, H]``; rows no id names are
zero, the ``padding_idx`` row too). Three paths (:data:`~solkit.kernels.embedding.paths.PATHS`):

* ``sorted`` (deterministic, the default): dW is zeroed (one memset at the copy engine's write rate), the ids
  are sorted (stable, so equal ids keep token order), each sorted position finds its run of equal ids by binary
  search over the ``T`` sorted ids, and the first position of each run sums the run's rows in fp32 in token
  order and writes that one row; the other positions' programs return at once. Bytes: ``e V H`` zeroed +
  ``8 T`` ids (+ the sort's and the run bounds' ``~48 T``) + ``e T H`` dY read + ``e U H`` written (``U``
  distinct ids, at most ``T``).
* ``dense`` (deterministic): the zero fill fused into the sums: one program per (vocabulary row, column slice)
  finds its run in the sorted ids (binary search over ``arange(V)``) and writes its sum, or zeros. dW is
  written exactly once, but as ``V`` small programs (128k for Llama-3) rather than one memset.
* ``atomic``: every token's row is added into an fp32 copy of dW with ``atomic_add`` (order not fixed, so the
  last bits may differ run to run), then cast to the weight's dtype unless it is fp32. Bytes:
  ``4 V H`` zeroed + ``e T H`` read + ``4 T H`` atomics + (casting) ``4 V H`` read and ``e V H`` written; it
  pays for a 16-bit table and suits an fp32 one, where it writes dW directly.

T_SOL of either = (``16 T + e T H + e V H``) / memory bandwidth: the dense dW must be written once whatever the
structure, and for a 128k vocabulary it is most of the traffic (1 GB at H = 4096 in bf16). ``sorted`` writes the
``U`` looked-up rows twice (zero, then the sum): ``e U H`` more, 6 % at 8192 tokens of a 128k vocabulary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common.capability import allowed, device_caps
from solkit.kernels.embedding.paths import PATHS

MAX_BLOCK_H = 4096  # 8 KB of a bf16 row per program: one row of a 4096-wide table in one program


@triton.jit
def _gather_kernel(IDS, W, OUT, hidden, s_w, s_o, BLOCK_H: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < hidden
    row = tl.load(IDS + t).to(tl.int64)
    vals = tl.load(W + row * s_w + cols, mask=mask)
    tl.store(OUT + t.to(tl.int64) * s_o + cols, vals, mask=mask)


@triton.jit
def _sorted_bwd_kernel(DY, SORTED, ORDER, FIRST, END, DW, hidden, s_dy, s_dw, pad, BLOCK_H: tl.constexpr):
    i = tl.program_id(0)  # a position in the sorted ids: only the first of each run of equal ids works
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < hidden
    v = tl.load(SORTED + i)
    first = tl.load(FIRST + i)
    end = tl.load(END + i)
    if (first == i) & (v != pad):  # the padding row gets no gradient
        acc = tl.zeros([BLOCK_H], tl.float32)
        for j in range(i, end):  # this id's tokens, in token order: the sum is the same every run
            t = tl.load(ORDER + j).to(tl.int64)
            acc += tl.load(DY + t * s_dy + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(DW + v.to(tl.int64) * s_dw + cols, acc.to(DW.dtype.element_ty), mask=mask)


@triton.jit
def _dense_bwd_kernel(DY, ORDER, LO, HI, DW, hidden, s_dy, s_dw, pad, BLOCK_H: tl.constexpr):
    v = tl.program_id(0)  # one vocabulary row: the sum of its tokens' rows, or zeros
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < hidden
    lo = tl.load(LO + v)
    hi = tl.where(v == pad, lo, tl.load(HI + v))  # the padding row gets no gradient
    acc = tl.zeros([BLOCK_H], tl.float32)
    for j in range(lo, hi):  # this row's tokens, in token order
        t = tl.load(ORDER + j).to(tl.int64)
        acc += tl.load(DY + t * s_dy + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(DW + v.to(tl.int64) * s_dw + cols, acc.to(DW.dtype.element_ty), mask=mask)


@triton.jit
def _atomic_bwd_kernel(IDS, DY, ACC, hidden, s_dy, s_acc, pad, BLOCK_H: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    row = tl.load(IDS + t).to(tl.int64)
    mask = cols < tl.where(row == pad, 0, hidden)  # the padding row gets no gradient
    g = tl.load(DY + t.to(tl.int64) * s_dy + cols, mask=mask, other=0.0).to(tl.float32)
    tl.atomic_add(ACC + row * s_acc + cols, g, mask=mask, sem="relaxed")


def _launch(hidden: int) -> tuple[int, int]:
    block = min(MAX_BLOCK_H, triton.next_power_of_2(max(hidden, 16)))
    return block, 8 if block >= 2048 else 4


def _check_ids(ids: torch.Tensor, weight: torch.Tensor) -> None:
    if ids.dtype not in (torch.int32, torch.int64):
        raise SolkitError(f"embedding: ids must be int32 or int64, got {ids.dtype}")
    if weight.dim() != 2:
        raise SolkitError(f"embedding: weight must be [num_embeddings, dim], got {tuple(weight.shape)}")
    if weight.stride(-1) != 1:
        raise SolkitError("embedding: the weight's rows must be contiguous")


def embedding_forward(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``weight[ids]``: shape ``ids.shape + (dim,)``, weight's dtype. Ids must lie in ``[0, num_embeddings)``
    (not checked on the device: a check would synchronise)."""
    _check_ids(ids, weight)
    flat = ids.reshape(-1)
    hidden = weight.shape[1]
    out = torch.empty((flat.numel(), hidden), dtype=weight.dtype, device=weight.device)
    if flat.numel() and hidden:
        block, warps = _launch(hidden)
        _gather_kernel[(flat.numel(), triton.cdiv(hidden, block))](
            flat, weight, out, hidden, weight.stride(0), out.stride(0), BLOCK_H=block, num_warps=warps
        )
    return out.view(*ids.shape, hidden)


def _dense_backward(dy, flat, num_embeddings: int, pad: int, block: int, warps: int) -> torch.Tensor:
    """The ``dense`` path: one program per vocabulary row writes its sum or zeros (module docstring)."""
    hidden = dy.shape[1]
    dw = torch.empty((num_embeddings, hidden), dtype=dy.dtype, device=dy.device)
    if num_embeddings and hidden:
        sorted_ids, order = torch.sort(flat, stable=True)
        rows = torch.arange(num_embeddings, device=dy.device, dtype=sorted_ids.dtype)
        lo, hi = torch.searchsorted(sorted_ids, rows), torch.searchsorted(sorted_ids, rows, right=True)
        _dense_bwd_kernel[(num_embeddings, triton.cdiv(hidden, block))](
            dy, order, lo, hi, dw, hidden, dy.stride(0), dw.stride(0), pad, BLOCK_H=block, num_warps=warps
        )
    return dw


def embedding_backward(
    grad_out: torch.Tensor,
    ids: torch.Tensor,
    num_embeddings: int,
    padding_idx: int | None = None,
    path: str | None = None,
) -> torch.Tensor:
    """The dense gradient ``[num_embeddings, dim]`` of :func:`embedding_forward` for ``grad_out``
    (``ids.shape + (dim,)``), in ``grad_out``'s dtype. ``path``: ``"sorted"`` (deterministic; default) or
    ``"dense"`` or ``"atomic"`` (module docstring)."""
    names = allowed(PATHS["embedding_bwd"], device_caps(grad_out), "embedding_bwd")
    path = path or names[0]
    if path not in names:
        raise SolkitError(f"embedding_bwd: path {path!r} not allowed here; allowed: {', '.join(names)}")
    hidden = grad_out.shape[-1]
    dy = grad_out.reshape(-1, hidden)
    if dy.stride(-1) != 1:
        dy = dy.contiguous()
    flat = ids.reshape(-1)
    if flat.numel() != dy.shape[0]:
        raise SolkitError(f"embedding_bwd: {flat.numel()} ids but {dy.shape[0]} gradient rows")
    pad = -1 if padding_idx is None else int(padding_idx) % num_embeddings
    block, warps = _launch(hidden)
    if path == "atomic":
        acc = torch.zeros((num_embeddings, hidden), dtype=torch.float32, device=dy.device)
        if flat.numel() and hidden:
            _atomic_bwd_kernel[(flat.numel(), triton.cdiv(hidden, block))](
                flat, dy, acc, hidden, dy.stride(0), acc.stride(0), pad, BLOCK_H=block, num_warps=warps
            )
        return acc if dy.dtype == torch.float32 else acc.to(dy.dtype)
    if path == "dense":
        return _dense_backward(dy, flat, num_embeddings, pad, block, warps)
    dw = torch.zeros((num_embeddings, hidden), dtype=dy.dtype, device=dy.device)
    if flat.numel() and hidden:
        sorted_ids, order = torch.sort(flat, stable=True)
        first = torch.searchsorted(sorted_ids, sorted_ids)  # where each position's run of equal ids starts
        end = torch.searchsorted(sorted_ids, sorted_ids, right=True)  # and where it ends
        _sorted_bwd_kernel[(flat.numel(), triton.cdiv(hidden, block))](
            dy, sorted_ids, order, first, end, dw, hidden, dy.stride(0), dw.stride(0), pad, BLOCK_H=block,
            num_warps=warps,
        )  # fmt: skip
    return dw
