"""Prefill attention as custom ops (``solkit::attention`` and ``solkit::attention_bwd``), and the differentiable
public function over them, :func:`attention`.

The forward op returns the output and the fp32 logsumexp (base 2, non-differentiable) that the backward op reads;
launch settings travel as JSON strings (:func:`~solkit.kernels.common.ops.options_json`), resolved before the op
from the device, the path and the caller's ``options``, so the op is a pure function of its arguments.
"""

from __future__ import annotations

import math

import torch

from solkit.errors import SolkitError
from solkit.kernels.attention.backward import backward
from solkit.kernels.attention.layout import geometry
from solkit.kernels.attention.paths import PATHS, settings
from solkit.kernels.attention.prefill import forward
from solkit.kernels.common.capability import allowed, device_caps, reasons_against
from solkit.kernels.common.ops import KernelOp, options_json
from solkit.kernels.common.ops import options as decoded


def _geo(q, k, v, cu_seqlens, max_seqlen, causal):
    return geometry(q, k, v, causal, cu_seqlens, max_seqlen if cu_seqlens is not None else None)


def _attention_bwd(
    do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    cu_seqlens: torch.Tensor | None, max_seqlen: int, causal: bool, scale: float, bwd: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    geo = _geo(q, k, v, cu_seqlens, max_seqlen, causal)
    return backward(do, q, k, v, out, lse, geo, causal, scale, cu_seqlens, decoded(bwd))


def _attention_bwd_fake(do, q, k, v, out, lse, cu_seqlens, max_seqlen, causal, scale, bwd):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


ATTENTION_BWD = KernelOp("attention_bwd", _attention_bwd, _attention_bwd_fake)


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None, max_seqlen: int,
    causal: bool, scale: float, fwd: str, bwd: str,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    geo = _geo(q, k, v, cu_seqlens, max_seqlen, causal)
    return forward(q, k, v, geo, causal, scale, cu_seqlens, decoded(fwd))


def _attention_fake(q, k, v, cu_seqlens, max_seqlen, causal, scale, fwd, bwd):
    geo = _geo(q, k, v, cu_seqlens, max_seqlen, causal)
    return q.new_empty(q.shape), q.new_empty(geo.lse_shape(), dtype=torch.float32)


def _attention_setup(ctx, inputs, output) -> None:
    q, k, v, cu_seqlens, max_seqlen, causal, scale, _fwd, bwd = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens)
    ctx.max_seqlen, ctx.causal, ctx.scale, ctx.bwd = max_seqlen, causal, scale, bwd


def _attention_backward(ctx, do, _dlse):
    q, k, v, out, lse, cu_seqlens = ctx.saved_tensors
    if do is None:
        return None, None, None, None, None, None, None, None, None
    dq, dk, dv = ATTENTION_BWD(do, q, k, v, out, lse, cu_seqlens, ctx.max_seqlen, ctx.causal, ctx.scale, ctx.bwd)
    return dq, dk, dv, None, None, None, None, None, None


ATTENTION = KernelOp(
    "attention", _attention, _attention_fake, backward=_attention_backward, setup_context=_attention_setup
)


def _tma_aligned(*tensors: torch.Tensor) -> bool:
    """TMA descriptors need 16-byte aligned bases and token strides (head and batch strides are whole rows). The
    caching allocator's blocks are aligned far beyond 16 bytes, so a base is aligned when its storage offset is
    (asked of the offset, not the pointer, so fake tensors answer too)."""
    return all((t.storage_offset() * t.element_size()) % 16 == 0
               and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1]) for t in tensors)  # fmt: skip


def _path(kernel: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, path: str | None) -> str:
    """``kernel``'s path (``attention_fwd`` or ``attention_bwd``): the one asked for if the device runs it, else the
    fastest the device runs, TMA only for 16-byte aligned tensors."""
    caps = device_caps(q)
    paths = dict(PATHS[kernel])
    if path is not None:
        if path not in paths:
            raise SolkitError(f"attention: unknown path {path!r}; allowed: {', '.join(paths)}")
        reasons = reasons_against(paths[path], caps)
        if reasons:
            raise SolkitError(f"attention: path {path!r} does not run on {caps.name}: {'; '.join(reasons)}")
        return path
    names = allowed(PATHS[kernel], caps, kernel)
    return names[0] if names[0] != "tma" or _tma_aligned(q, k, v) else "portable"


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    path: str | None = None,
    options: dict | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, forward and backward (the op ``solkit::attention``), for GQA.

    Dense: ``q`` ``(B, Hq, S, D)``, ``k``/``v`` ``(B, Hkv, S_k, D)`` (SDPA's layout; ``Hq`` a multiple of ``Hkv``).
    Varlen: ``cu_seqlens`` (int32, ``sequences + 1`` offsets) with ``q`` ``(T, Hq, D)``, ``k``/``v``
    ``(T, Hkv, D)``; ``max_seqlen`` the longest sequence (found with a host sync when None). ``causal``: each
    query sees the keys up to its own position (self-attention; top-left aligned). ``scale`` defaults to
    ``D ** -0.5``. ``path``: ``"tma"`` or ``"portable"`` (default: the fastest the device runs); ``options``:
    ``{"fwd": {...}, "bwd": {...}}`` launch settings over the tuned ones (``block_m``, ``block_n``,
    ``num_warps``, ``num_stages``, ``warp_spec``, the structure knobs of ``prefill.STRUCTURE``, ``compile``;
    backward ``dkdv``/``dq``/``delta_block``).
    """
    geo = geometry(q, k, v, causal, cu_seqlens, max_seqlen)
    caps = device_caps(q)
    chosen = _path("attention_fwd", q, k, v, path)
    opts = options or {}
    unknown = set(opts) - {"fwd", "bwd"}
    if unknown:
        raise SolkitError(f"attention: unknown options {sorted(unknown)}; allowed: fwd, bwd")
    fwd = settings("fwd", caps, geo.head_dim, q.element_size())
    portable = fwd.pop("portable", None)  # the pointer-load path's own tuned overrides, where measured
    if chosen == "portable" and portable:
        fwd.update(portable)
    fwd = {**fwd, **opts.get("fwd", {}), "tma": chosen == "tma"}
    bwd = settings("bwd", caps, geo.head_dim, q.element_size())
    bwd["dkdv"]["tma"] = _path("attention_bwd", q, k, v, path) == "tma"
    for key, value in opts.get("bwd", {}).items():
        bwd[key] = {**bwd[key], **value} if isinstance(value, dict) else value
    scale = 1.0 / math.sqrt(geo.head_dim) if scale is None else float(scale)
    out, _ = ATTENTION(q, k, v, cu_seqlens, geo.seqlen_q, bool(causal), scale, options_json(fwd), options_json(bwd))
    return out
