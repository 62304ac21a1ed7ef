"""The GEMMs of a measured step, one entry per distinct call: what ``solkit model-check`` times with the bench.

Each entry is an aten ``mm``, ``addmm`` or ``bmm`` at one set of shapes, operand layouts and dtype, forward or
backward, with its measured time per call (the profiler's kernel time), T_SOL per call and SOL fraction. An
operand is *transposed* when it is stored column-major (its last dimension is not the contiguous one), as
``W.T`` in a linear layer's forward or the output gradient's transpose in its weight gradient: cuBLAS picks its
kernel by these layouts, so two calls of the same shapes may not run the same kernel.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from solkit.model.attribute import OpEvent
from solkit.model.clocks import StepClocks
from solkit.sol.model import Ceilings, sol_fraction, t_sol

#: The aten ops a GEMM entry covers.
GEMM_OPS = ("mm", "addmm", "bmm")


def is_transposed(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Stored column-major in its last two dimensions (a size-1 dimension's stride is not a layout)."""
    if len(shape) < 2 or len(stride) != len(shape) or shape[-1] == 1 or stride[-1] == 1:
        return False
    return stride[-2] == 1 or shape[-2] == 1


def _operands(r: OpEvent) -> tuple[tuple, tuple, tuple, tuple, tuple | None]:
    """(a shape, a stride, b shape, b stride, bias shape or None) of an mm/addmm/bmm row."""
    first = 1 if r.op == "addmm" else 0
    shapes, strides = list(r.shapes), list(r.strides)
    a, b = shapes[first], shapes[first + 1]
    sa = strides[first] if len(strides) > first else ()
    sb = strides[first + 1] if len(strides) > first + 1 else ()
    return a, sa, b, sb, (shapes[0] if first else None)


def _dims(op: str, a: tuple, b: tuple) -> dict[str, int]:
    batch = a[0] if op == "bmm" else 1
    return {"batch": int(batch), "m": int(a[-2]), "k": int(a[-1]), "n": int(b[-1])}


def layout_text(a_t: bool, b_t: bool) -> str:
    """``A @ B^T`` and the like: ^T marks an operand stored transposed (column-major)."""
    return f"{'A^T' if a_t else 'A'} @ {'B^T' if b_t else 'B'}"


#: Half-width of the window a GEMM's local duty is taken over (profiler microseconds): about the time the GPU's power
#: management takes to respond, so the duty says how hard the card was working around the call.
LOCAL_WINDOW_US = 10_000.0


def local_duty(spans: list[tuple[float, float]], gemm_spans: list[tuple[float, float]], bounds: tuple[float, float],
               window_us: float = LOCAL_WINDOW_US) -> float | None:  # fmt: skip
    """The median over ``spans`` of the GEMM duty around each: GEMM kernel time (``gemm_spans``) within
    ``window_us`` of the span, over the window's length clipped to the step (``bounds``)."""
    duties = []
    for a, b in spans:
        lo, hi = max(a - window_us, bounds[0]), min(b + window_us, bounds[1])
        if hi <= lo:
            continue
        busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in gemm_spans)
        duties.append(min(busy / (hi - lo), 1.0))
    return statistics.median(duties) if duties else None


def gemm_entries(rows: list[OpEvent], ceilings: Ceilings, clocks: StepClocks | None = None) -> list[dict[str, Any]]:
    """The distinct GEMM calls of a step's rows (those with a T_SOL), by time, each with its measured time, T_SOL
    and SOL fraction per call, and (``clocks``) the SM clock and power its kernels ran at."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r.kind != "aten" or r.op not in GEMM_OPS or not r.match or len(r.shapes) < (3 if r.op == "addmm" else 2):
            continue
        a, sa, b, sb, bias = _operands(r)
        a_t, b_t = is_transposed(a, sa), is_transposed(b, sb)
        dtype = r.dtypes[1 if r.op == "addmm" else 0] if r.dtypes else ""
        key = (r.op, r.shapes, a_t, b_t, dtype, r.backward)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "op": r.op,
                "backward": r.backward,
                **_dims(r.op, a, b),
                "a_shape": list(a),
                "a_stride": list(sa),
                "b_shape": list(b),
                "b_stride": list(sb),
                "bias_shape": list(bias) if bias is not None else None,
                "a_transposed": a_t,
                "b_transposed": b_t,
                "layout": layout_text(a_t, b_t),
                "dtype": dtype,
                "category": r.category,
                "calls": 0,
                "time_s": 0.0,
                "t_sol_s": 0.0,
                "flops_per_call": float(sum(r.flops.values())),
                "bytes_per_call": float(r.bytes),
                "spans": [],
            }
        g["calls"] += 1
        g["time_s"] += r.time_s
        res = t_sol(r.flops, r.bytes, ceilings)
        g["t_sol_s"] += res.t_sol_s
        g["bound"] = res.bound
        g["spans"] += r.spans
    out = []
    gemm_spans = sorted(s for g in groups.values() for s in g["spans"])
    every = [s for r in rows for s in r.spans]
    bounds = (min(a for a, _ in every), max(b for _, b in every)) if every else (0.0, 0.0)
    for g in sorted(groups.values(), key=lambda g: g["time_s"], reverse=True):
        time_s, ts, n, spans = g.pop("time_s"), g.pop("t_sol_s"), g["calls"], g.pop("spans")
        g["clock"] = clocks.during(spans) if clocks is not None else None
        g["local_duty"] = local_duty(spans, gemm_spans, bounds)
        a = "x".join(str(d) for d in g["a_shape"])
        b = "x".join(str(d) for d in g["b_shape"])
        g["name"] = f"{g['op']}{' (bwd)' if g['backward'] else ''} [{a}] @ [{b}] {g['layout']}"
        g["time_ms"] = time_s * 1e3
        g["time_ms_per_call"] = time_s * 1e3 / n
        g["t_sol_ms_per_call"] = ts * 1e3 / n
        g["sol_raw"] = ts / time_s if time_s > 0 else None
        g["sol_fraction"] = sol_fraction(ts, time_s).sol_fraction if time_s > 0 else None
        out.append(g)
    return out
