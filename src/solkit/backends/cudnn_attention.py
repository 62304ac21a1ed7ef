"""cuDNN's fused attention through the cuDNN frontend's Python graph API (``nvidia-cudnn-frontend``,
``import cudnn``): the ``cudnn`` bench backend, forward and backward, causal GQA.

One graph per (shapes, strides, dtype, device, direction), built once (``validate`` -> plans by heuristics A then
fallback -> ``build_plans``) and executed on PyTorch's current stream. The forward keeps the softmax statistics
(``Stats``: fp32 log-sum-exp per query row) for the backward, as training does. K/V with fewer heads than Q is
cuDNN's own GQA (no ``repeat_interleave``).

The package declares ``nvidia-cutlass-dsl`` as a dependency; the Hopper SDPA graphs run on the cuDNN library's
own engines and do not import it, so the frontend may be installed without it (``pip install --no-deps``).
Anything missing (the package, the cuDNN library, an engine for a shape) raises
:class:`~solkit.errors.SolkitError`, which the bench shows as an ``unavailable`` row with the reason.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from solkit.errors import SolkitError

_GRAPHS: dict[tuple, Any] = {}
_HANDLES: dict[int, Any] = {}


def _cudnn():
    try:
        return importlib.import_module("cudnn")
    except Exception as exc:  # noqa: BLE001 - any import failure makes the backend unavailable
        raise SolkitError(f"cudnn: nvidia-cudnn-frontend not importable ({type(exc).__name__}: {exc})"[:300]) from None


def probe() -> str | None:
    """None when the frontend imports and reports a cuDNN library; else the one-line reason it cannot run."""
    try:
        cudnn = _cudnn()
        version = cudnn.backend_version()
    except SolkitError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. libcudnn not found by the frontend
        return f"cudnn: frontend imported but the cuDNN library did not answer ({type(exc).__name__}: {exc})"[:300]
    return None if version else "cudnn: the frontend reports no cuDNN library"


def _handle(cudnn, device: torch.device):
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _HANDLES:
        with torch.cuda.device(index):
            _HANDLES[index] = cudnn.create_handle()
    handle = _HANDLES[index]
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(device).cuda_stream)
    return handle


def _dtype(cudnn, t: torch.Tensor):
    table = {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF}
    if t.dtype not in table:
        raise SolkitError(f"cudnn: attention takes bf16 or fp16, got {t.dtype}")
    return table[t.dtype]


def _key(direction: str, causal: bool, *tensors: torch.Tensor) -> tuple:
    return (direction, causal, tensors[0].dtype, tensors[0].device) + tuple(
        (tuple(t.shape), tuple(t.stride())) for t in tensors
    )


def _build(graph, cudnn, what: str) -> None:
    try:
        graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except Exception as exc:  # noqa: BLE001 - no engine for this graph: a reason, not a crash
        raise SolkitError(f"cudnn: no {what} engine for this shape ({type(exc).__name__}: {exc})"[:300]) from None


def _forward_graph(q, k, v, causal: bool, scale: float):
    key = _key("fwd", causal, q, k, v)
    if key not in _GRAPHS:
        cudnn = _cudnn()
        g = cudnn.pygraph(io_data_type=_dtype(cudnn, q), intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=_handle(cudnn, q.device))  # fmt: skip
        qt, kt, vt = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
        o, stats = g.sdpa(name="sdpa", q=qt, k=kt, v=vt, generate_stats=True, attn_scale=scale,
                          use_causal_mask=causal)  # fmt: skip
        o.set_output(True).set_dim(list(q.shape)).set_stride(list(torch.empty_like(q).stride()))
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        _build(g, cudnn, "forward")
        _GRAPHS[key] = (g, (qt, kt, vt, o, stats), g.get_workspace_size())
    return _GRAPHS[key]


def _backward_graph(q, k, v, o, do, stats, causal: bool, scale: float):
    key = _key("bwd", causal, q, k, v, o, do, stats)
    if key not in _GRAPHS:
        cudnn = _cudnn()
        g = cudnn.pygraph(io_data_type=_dtype(cudnn, q), intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=_handle(cudnn, q.device))  # fmt: skip
        ts = tuple(g.tensor_like(t) for t in (q, k, v, o, do, stats))
        dq, dk, dv = g.sdpa_backward(name="sdpa_backward", q=ts[0], k=ts[1], v=ts[2], o=ts[3], dO=ts[4],
                                     stats=ts[5], attn_scale=scale, use_causal_mask=causal)  # fmt: skip
        for grad, like in ((dq, q), (dk, k), (dv, v)):
            grad.set_output(True).set_dim(list(like.shape)).set_stride(list(torch.empty_like(like).stride()))
        _build(g, cudnn, "backward")
        _GRAPHS[key] = (g, ts + (dq, dk, dv), g.get_workspace_size())
    return _GRAPHS[key]


def _run(graph, bindings: dict, workspace_bytes: int, device: torch.device) -> None:
    cudnn = _cudnn()
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device=device)
    graph.execute(bindings, workspace, handle=_handle(cudnn, device))


def forward(q, k, v, causal: bool = True, scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, stats)``: attention of ``q`` [B, Hq, S, D] over ``k``/``v`` [B, Hkv, S, D]; ``stats`` [B, Hq, S, 1]
    fp32 is the log-sum-exp the backward needs."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    g, (qt, kt, vt, ot, st), ws = _forward_graph(q, k, v, causal, scale)
    out = torch.empty_like(q)
    stats = torch.empty((*q.shape[:-1], 1), dtype=torch.float32, device=q.device)
    _run(g, {qt: q, kt: k, vt: v, ot: out, st: stats}, ws, q.device)
    return out, stats


def backward(q, k, v, out, dout, stats, causal: bool = True, scale: float | None = None):
    """``(dq, dk, dv)`` of :func:`forward` for the output gradient ``dout``."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dout = dout.contiguous() if dout.stride() != out.stride() else dout
    g, ts, ws = _backward_graph(q, k, v, out, dout, stats, causal, scale)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _run(g, dict(zip(ts, (q, k, v, out, dout, stats, dq, dk, dv))), ws, q.device)
    return dq, dk, dv


class CudnnAttentionFunction(torch.autograd.Function):
    """Autograd over the two graphs: saves q, k, v, the output and the statistics."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool):
        out, stats = forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, stats)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, stats = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, out, dout, stats, ctx.causal)
        return dq, dk, dv, None


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA attention, [batch, heads, seq, head_dim], through cuDNN's fused SDPA (autograd included)."""
    return CudnnAttentionFunction.apply(q, k, v, True)
