"""Embedding as custom ops (``solkit::embedding`` and ``solkit::embedding_bwd``), the differentiable public function
and the drop-in module (the family pattern of :mod:`solkit.kernels.common.ops`)."""

from __future__ import annotations

import torch

from solkit.kernels.common.ops import KernelOp
from solkit.kernels.embedding.lookup import embedding_backward, embedding_forward


def _bwd(grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int, padding_idx: int, path: str) -> torch.Tensor:
    return embedding_backward(grad_out, ids, num_embeddings, None if padding_idx < 0 else padding_idx, path or None)


def _bwd_fake(grad_out, ids, num_embeddings, padding_idx, path):
    return grad_out.new_empty((num_embeddings, grad_out.shape[-1]))


EMBEDDING_BWD = KernelOp("embedding_bwd", _bwd, _bwd_fake)


def _fwd(ids: torch.Tensor, weight: torch.Tensor, padding_idx: int, path: str) -> torch.Tensor:
    return embedding_forward(ids, weight)


def _fwd_fake(ids, weight, padding_idx, path):
    return weight.new_empty((*ids.shape, weight.shape[1]))


def _setup(ctx, inputs, output) -> None:
    ids, weight, padding_idx, path = inputs
    ctx.save_for_backward(ids)
    ctx.num_embeddings, ctx.padding_idx, ctx.path, ctx.weight_dtype = weight.shape[0], padding_idx, path, weight.dtype


def _backward(ctx, grad_out):
    (ids,) = ctx.saved_tensors
    dw = EMBEDDING_BWD(grad_out.to(ctx.weight_dtype), ids, ctx.num_embeddings, ctx.padding_idx, ctx.path)
    return None, dw, None, None


EMBEDDING = KernelOp("embedding", _fwd, _fwd_fake, backward=_backward, setup_context=_setup)


def embedding(
    ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None, path: str | None = None
) -> torch.Tensor:
    """``weight[ids]`` (differentiable in ``weight``; the op ``solkit::embedding``). The backward is the dense
    gradient, ``padding_idx``'s row left zero; ``path`` picks its structure: ``"sorted"`` (deterministic, default)
    or ``"atomic"`` (docs/kernels/embedding.md)."""
    pad = -1 if padding_idx is None else int(padding_idx) % weight.shape[0]
    return EMBEDDING(ids, weight, pad, path or "")


class Embedding(torch.nn.Module):
    """Drop-in ``torch.nn.Embedding`` (no ``max_norm``, ``scale_grad_by_freq`` or sparse gradients)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        path: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(num_embeddings, embedding_dim, device=device, dtype=dtype))
        self.padding_idx, self.path = padding_idx, path
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding(ids, self.weight, self.padding_idx, self.path)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, {self.weight.shape[1]}, padding_idx={self.padding_idx}"
