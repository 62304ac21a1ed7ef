"""The geometry of one attention call: layout, shapes and the strides the kernels index with.

Layouts (the kernels index by strides, so a view with the last dimension contiguous is read in place):

* dense: ``q`` ``(B, Hq, S, D)``, ``k``/``v`` ``(B, Hkv, S_k, D)``, as ``F.scaled_dot_product_attention`` takes
  them and as the suite's attention rows lay them out, so neither pays a transpose;
* varlen (``cu_seqlens`` given): ``q`` ``(T, Hq, D)``, ``k``/``v`` ``(T, Hkv, D)``, the packed token layout of
  FlashAttention's varlen call, ``T`` the total tokens of all sequences, sequence ``i`` the tokens
  ``cu_seqlens[i]:cu_seqlens[i + 1]`` (self-attention: queries and keys share ``cu_seqlens``).

GQA: ``Hq`` a multiple of ``Hkv``; q head ``h`` reads kv head ``h // (Hq / Hkv)``, never a repeated copy.
The logsumexp saved for the backward is fp32 ``(B, Hq, S)`` dense, ``(Hq, T)`` varlen, in base 2 of the
scaled scores (``log2 sum_j 2^(s_ij scale log2 e)``), the unit the kernels' ``exp2`` works in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from solkit.errors import SolkitError

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128)


@dataclass(frozen=True)
class Geometry:
    batch: int  # B dense, number of sequences varlen
    heads_q: int
    heads_kv: int
    seqlen_q: int  # S dense, the longest sequence varlen (the grid's extent)
    seqlen_k: int
    head_dim: int
    varlen: bool
    tokens: int  # T varlen, B * S dense

    @property
    def group(self) -> int:
        return self.heads_q // self.heads_kv

    def strides(self, t: torch.Tensor) -> tuple[int, int, int]:
        """(batch, head, token) strides of ``t`` in elements; varlen tensors have no batch stride."""
        if self.varlen:
            return 0, t.stride(1), t.stride(0)
        return t.stride(0), t.stride(1), t.stride(2)

    def lse_shape(self) -> tuple[int, ...]:
        return (self.heads_q, self.tokens) if self.varlen else (self.batch, self.heads_q, self.seqlen_q)

    def lse_strides(self) -> tuple[int, int]:
        """(batch, head) strides of the logsumexp; its token stride is 1."""
        return (0, self.tokens) if self.varlen else (self.heads_q * self.seqlen_q, self.seqlen_q)


def _check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rank: int, what: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != rank:
            raise SolkitError(f"attention: {name} must be {what}, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise SolkitError(f"attention: {name} dtype {t.dtype} not supported; use float16, bfloat16 or float32")
        if t.stride(-1) != 1:
            raise SolkitError(f"attention: {name} must have a contiguous last (head_dim) dimension")
    if not (q.dtype == k.dtype == v.dtype):
        raise SolkitError(f"attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise SolkitError("attention: q, k, v are on different devices")
    if k.shape != v.shape:
        raise SolkitError(f"attention: k and v shapes differ ({tuple(k.shape)} vs {tuple(v.shape)})")


def geometry(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
) -> Geometry:
    """Check the inputs of :func:`~solkit.kernels.attention.attention` and return their geometry (bad input: a
    one-line SolkitError naming the argument)."""
    varlen = cu_seqlens is not None
    if varlen:
        _check_tensors(q, k, v, 3, "(tokens, heads, head_dim) with cu_seqlens")
        tokens, hq, d = q.shape
        if k.shape[0] != tokens:
            raise SolkitError(f"attention: varlen k has {k.shape[0]} tokens, q has {tokens}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32:
            raise SolkitError("attention: cu_seqlens must be a 1-D int32 tensor of (sequences + 1) offsets")
        if cu_seqlens.device != q.device:
            raise SolkitError("attention: cu_seqlens must be on the device of q")
        if max_seqlen is None:
            max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())  # a host sync; pass it to avoid
        if max_seqlen < 0:
            raise SolkitError(f"attention: max_seqlen must be >= 0, got {max_seqlen}")
        batch, sq, sk, hkv = cu_seqlens.numel() - 1, int(max_seqlen), int(max_seqlen), k.shape[1]
    else:
        _check_tensors(q, k, v, 4, "(batch, heads, seq, head_dim)")
        batch, hq, sq, d = q.shape
        _, hkv, sk, _ = k.shape
        if k.shape[0] != batch:
            raise SolkitError(f"attention: k batch {k.shape[0]} differs from q batch {batch}")
        if causal and sq != sk:
            raise SolkitError(f"attention: causal needs as many queries as keys (self-attention), got {sq} and {sk}")
        tokens = batch * sq
    if k.shape[-1] != d:
        raise SolkitError(f"attention: k head_dim {k.shape[-1]} differs from q head_dim {d}")
    if d not in HEAD_DIMS:
        raise SolkitError(f"attention: head_dim {d} not supported; allowed: {', '.join(map(str, HEAD_DIMS))}")
    if hkv == 0 or hq % hkv:
        raise SolkitError(f"attention: q heads ({hq}) must be a multiple of kv heads ({hkv})")
    return Geometry(batch, hq, hkv, sq, sk, d, varlen, tokens)
