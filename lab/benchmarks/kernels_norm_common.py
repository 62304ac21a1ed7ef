"""Shared parts of the norm/softmax kernel benchmark (``lab/benchmarks/kernels_norm.py``): the ops and their
byte counts, inputs, the correctness check against an fp32 reference, the timing wrapper, the
calibrated copy bandwidth and the JSON recorder.

Correctness first: fresh random inputs (never zeros), the allocator's free memory poisoned with NaN
before the run, outputs and gradients compared with an fp32 computation on upcast inputs; a backend
passes when its max error is at most 2x torch eager's own same-dtype error plus a small atol.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from solkit.kernels.norms import add_rmsnorm, layernorm, rmsnorm
from solkit.kernels.softmax import softmax, softmax_backward, softmax_forward
from solkit.sol.model import Ceilings, sol_fraction, t_sol
from solkit.timing import benchmark

DATASHEET_BW = 4.8e12
#: Op shapes by name suffix: Llama-3-8B (hidden 4096) and Llama-3-70B (hidden 8192, the main job's l class).
SHAPES = {
    "norm": {"": (8192, 4096), "_70b": (8192, 8192)},
    "softmax": {"": (8192, 4096), "_vocab": (4096, 128256), "_256k": (1024, 262144)},
}
EPS = 1e-6
T0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - T0


# ----------------------------------------------------------------------------------------------- ops
def hf_rmsnorm(x, w, eps=EPS):
    """HF Llama's RMSNorm, the eager baseline (and torch.compile's input)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def eager_add_rmsnorm(x, r, w):
    s = x + r
    return s, hf_rmsnorm(s, w)


def _liger():
    from liger_kernel.ops import (
        LigerFusedAddRMSNormFunction,
        LigerLayerNormFunction,
        LigerRMSNormFunction,
        LigerSoftmaxFunction,
    )

    return {
        "rmsnorm": lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False, None),
        "add_rmsnorm": lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)[::-1],
        "layernorm": lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, EPS),
        "softmax": lambda x: LigerSoftmaxFunction.apply(x),
    }


class LoopedSoftmax(torch.autograd.Function):
    """solkit's softmax forced onto the looped wide-row path (the default's alternative)."""

    @staticmethod
    def forward(ctx, x):
        y = softmax_forward(x, coop=False, split=False)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        return softmax_backward(dy, ctx.saved_tensors[0], coop=False, split=False)


@dataclass
class Op:
    """One benchmarked operation: ``fn(*acts, *params) -> output or tuple``; acts and params get grads."""

    name: str
    kind: str  # rmsnorm | add_rmsnorm | layernorm | softmax
    shape: tuple[int, int]
    n_acts: int
    n_params: int
    bytes_fwd: float
    bytes_fwdbwd: float
    reference: object  # fp32 function
    impls: dict = field(default_factory=dict)
    seed: int = 0


def _norm_ops(label: str, M: int, N: int, e: int) -> list[Op]:
    """RMSNorm, add+RMSNorm and LayerNorm at ``M x N`` (op names end with ``label``)."""
    MN = M * N
    ops = []
    ops.append(Op(
        f"rmsnorm{label}", "rmsnorm", (M, N), 1, 1,
        bytes_fwd=2 * MN * e + N * e, bytes_fwdbwd=5 * MN * e + 3 * N * e + 8 * M,
        reference=lambda x, w: hf_rmsnorm(x, w),
        impls={"solkit": lambda x, w: rmsnorm(x, w, EPS), "torch": hf_rmsnorm,
               "torch_F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)},
    ))  # fmt: skip
    ops.append(Op(
        f"add_rmsnorm{label}", "add_rmsnorm", (M, N), 2, 1,
        bytes_fwd=4 * MN * e + N * e, bytes_fwdbwd=8 * MN * e + 3 * N * e + 8 * M,
        reference=eager_add_rmsnorm,
        impls={"solkit": lambda x, r, w: add_rmsnorm(x, r, w, EPS), "torch": eager_add_rmsnorm},
    ))  # fmt: skip
    ops.append(Op(
        f"layernorm{label}", "layernorm", (M, N), 1, 2,
        bytes_fwd=2 * MN * e + 2 * N * e, bytes_fwdbwd=5 * MN * e + 5 * N * e + 16 * M,
        reference=lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
        impls={"solkit": lambda x, w, b: layernorm(x, w, b, EPS),
               "torch": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS)},
    ))  # fmt: skip
    return ops


def make_ops(shapes: dict, dtype: torch.dtype) -> list[Op]:
    e = torch.tensor([], dtype=dtype).element_size()
    ops = []
    for label, (M, N) in shapes["norm"].items():
        ops += _norm_ops(label, M, N, e)
    for label, (m, n) in shapes["softmax"].items():
        ops.append(Op(
            f"softmax{label}", "softmax", (m, n), 1, 0,
            bytes_fwd=2 * m * n * e, bytes_fwdbwd=5 * m * n * e,
            reference=lambda x: torch.softmax(x, -1),
            impls={"solkit": lambda x: softmax(x), "torch": lambda x: torch.softmax(x, -1)},
        ))  # fmt: skip
        if n > 16384:  # the looped path next to the default, in the same run
            ops[-1].impls["solkit_looped"] = lambda x: LoopedSoftmax.apply(x)
    return ops


def make_inputs(op: Op, dtype, device, seed: int):
    """Fresh random activations, params and output gradients (never zeros)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    M, N = op.shape
    scale = 4.0 if op.kind == "softmax" else 1.0
    acts = [torch.randn(M, N, device=device, dtype=dtype, generator=gen) * scale for _ in range(op.n_acts)]
    params = [(torch.rand(N, device=device, generator=gen) + 0.5).to(dtype)]
    if op.n_params == 2:
        params.append(torch.randn(N, device=device, generator=gen).to(dtype))
    params = params[: op.n_params]
    n_out = 2 if op.kind == "add_rmsnorm" else 1
    grads = [torch.randn(M, N, device=device, dtype=dtype, generator=gen) for _ in range(n_out)]
    return acts, params, grads


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ------------------------------------------------------------------------------------- correctness
def poison_free_memory(nbytes: int, device) -> None:
    """Fill soon-to-be-reused allocator blocks with 0xFF bytes (NaN in fp16/bf16/fp32) so an unwritten
    output element shows up as NaN instead of a plausible stale value."""
    if device.type == "cuda" and nbytes > 0:
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        t.fill_(255)
        del t


def run_mode(fn, acts, params, grads, mode):
    """Outputs (fwd) or outputs + gradients of acts and params (fwd+bwd)."""
    if mode == "fwd":
        with torch.no_grad():
            return as_tuple(fn(*acts, *params))
    leaves = [t.detach().requires_grad_() for t in acts + params]
    outs = as_tuple(fn(*leaves))
    return outs + tuple(torch.autograd.grad(outs, leaves, grads[: len(outs)]))


def max_err(outs, refs):
    return [float((o.float() - r.float()).abs().max()) for o, r in zip(outs, refs)]


def check(fn, op, mode, data, ref_outs, torch_errs, device) -> dict:
    acts, params, grads = data
    poison_free_memory(8 * sum(t.numel() * t.element_size() for t in acts + grads), device)
    outs = run_mode(fn, acts, params, grads, mode)
    if len(outs) != len(ref_outs):
        return {"ok": False, "error": f"{len(outs)} outputs, expected {len(ref_outs)}"}
    errs = max_err(outs, ref_outs)
    nan = any(not torch.isfinite(o).all() for o in outs)
    atol = 4e-3 if outs[0].element_size() == 2 else 1e-5  # about half a bf16 ulp at the largest |ref|
    budgets = [2 * te + atol * float(r.float().abs().max()) for te, r in zip(torch_errs, ref_outs)]
    rel = [float((o.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30)) for o, r in zip(outs, ref_outs)]
    ok = not nan and all(e <= b for e, b in zip(errs, budgets))
    return {"ok": ok, "nonfinite": nan, "max_abs_err": errs, "err_budget": budgets, "rel_l2_err": rel}


def reference_outputs(op, data, mode):
    acts, params, grads = data
    up = ([t.float() for t in acts], [t.float() for t in params], [g.float() for g in grads])
    return run_mode(op.reference, *up, mode)


# ------------------------------------------------------------------------------------------ timing
def timed_fn(fn, mode, n_acts, params, n_grads):
    """A callable for benchmark(): args = acts (+ grads); params are closed over."""
    if mode == "fwd":

        def run_fwd(*acts):
            with torch.no_grad():
                return fn(*acts, *params)

        return run_fwd

    p_leaves = [p.detach().requires_grad_() for p in params]

    def run_fwdbwd(*args):
        acts, grads = args[:n_acts], args[n_acts:]
        outs = as_tuple(fn(*acts, *p_leaves))
        return torch.autograd.grad(outs, list(acts) + p_leaves, grads[: len(outs)])

    return run_fwdbwd


def pool_for(op, dtype, device, mode, n_sets, seed):
    pool = []
    for k in range(n_sets):
        acts, _, grads = make_inputs(op, dtype, device, seed + 100 + k)
        if mode == "fwd":
            pool.append(tuple(acts))
        else:
            pool.append(tuple(a.requires_grad_() for a in acts) + tuple(grads))
    return pool


def calls_for(nbytes: float, timing_kw: dict) -> int:
    """Calls per CUDA graph: ~10 for short calls, fewer for long ones (each graph replay stays ~0.3-1 ms)."""
    return int(max(2, min(timing_kw.get("calls_per_graph", 10), round(0.5e-3 * 4e12 / max(nbytes, 1)))))


def sol_cols(bytes_moved, median_ms, bw_cal):
    out = {}
    for basis, bw in (("calibrated", bw_cal), ("datasheet", DATASHEET_BW)):
        if not bw:
            continue
        res = t_sol({}, bytes_moved, Ceilings("h200", basis, {}, bw))
        score = sol_fraction(res.t_sol_s, median_ms * 1e-3)
        out[f"t_sol_ms_{basis}"] = res.t_sol_ms
        out[f"sol_{basis}"] = score.sol_fraction
        out[f"violation_{basis}"] = score.violation
    out["achieved_TBps"] = bytes_moved / (median_ms * 1e-3) / 1e12
    return out


# --------------------------------------------------------------------------------------------- main
class Recorder:
    def __init__(self, path, meta):
        self.path, self.doc = path, {**meta, "rows": [], "sweep": []}

    def add(self, key, row):
        self.doc[key].append(row)
        self.flush()

    def flush(self):
        self.doc["elapsed_s"] = round(elapsed(), 2)
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self.doc, fh, indent=1, default=str)
            os.replace(tmp, self.path)


HARNESS_PROTOCOL = (
    "solkit.harness.timing.benchmark(method='auto', l2_flush_mode='read'): graph_events (per-call CUDA events inside "
    "a CUDA graph) for calls under 0.1 ms; L2 flushed by a read sweep before every call; two rotating input sets; "
    "the resolved method is in each row"
)


def timing_options(smoke: bool, reps: int) -> dict:
    """The harness protocol of the norm scripts (``smoke``: wall clock, two calls, for CPU plumbing runs)."""
    if smoke:
        return dict(method="wall", reps=2, trials=1, warmup=1)
    return dict(method="auto", reps=reps, trials=3, warmup=3, calls_per_graph=10, l2_flush_mode="read")


def run_meta(benchmark_name: str, device, dtype, timing_kw: dict, **extra) -> dict:
    """The header of a result document: what ran, where, with which versions and protocol."""
    import datetime as dt
    import platform
    import sys

    import triton

    return {
        "benchmark": benchmark_name,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "dtype": str(dtype).replace("torch.", ""),
        "timing": timing_kw, "timing_protocol": HARNESS_PROTOCOL, **extra,
    }  # fmt: skip


def record_bandwidth(rec, device, timing_kw) -> float | None:
    """The copy bandwidth of this run into ``rec.doc["bandwidth"]`` (GPU only); returns it (None on a CPU)."""
    if device.type != "cuda":
        return None
    bw, copy_info = measure_copy_bandwidth(device, timing_kw)
    rec.doc["bandwidth"] = {"copy_measured_Bps": bw, "copy_runs": copy_info, "datasheet_Bps": 4.8e12}
    return bw


def measure_copy_bandwidth(device, timing_kw) -> tuple[float, dict]:
    """Copy bandwidth (bytes read + written per second) of a 1 GiB ``copy_``, the calibrated basis,
    measured as ``solkit calibrate`` does (CUDA events around eager calls, same buffer size), L2
    flushed with the run's flush mode. An elementwise-kernel copy (``torch.mul(x, 1, out=y)``) is
    recorded next to it. (A ``copy_`` captured in a CUDA graph becomes a slower memcpy node: 2.7 TB/s
    in earlier runs, so the copy is never graph-timed.)"""
    n = 2**29  # bf16 elements: 1 GiB per buffer (>= 16x L2)
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(40):  # ~20 ms of streaming first, so clocks have ramped up
        dst.copy_(src)
    moved = 2 * src.numel() * src.element_size()
    info = {}
    for label, fn in (("copy_events", lambda: dst.copy_(src)), ("mul1_events", lambda: torch.mul(src, 1, out=dst))):
        res = benchmark(fn, **{**timing_kw, "method": "events", "reps": 30})
        info[label] = {"Bps": moved / (res.median_ms * 1e-3), "timing": res.to_dict()}
        print(f"  {label}: {info[label]['Bps'] / 1e12:.3f} TB/s", flush=True)
    return info["copy_events"]["Bps"], info


def same_bytes_stream_rows(rec, dtype, device, timing_kw, bw) -> None:
    """An elementwise copy (``torch.mul(x, 1, out=y)``) of the norm activations, timed like the ops: the
    practical ceiling for a one-read, one-write kernel of this size under this harness. Also timed
    after the other L2 flush mode, to bracket how much of the output's write-back lands in the timed
    call (read flush: L2 starts clean, up to an L2 of output may still be dirty when the call ends;
    write flush: L2 starts full of dirty lines whose write-back the call pays)."""
    M, N = SHAPES["norm"][""]
    other = "write" if timing_kw.get("l2_flush_mode", "read") == "read" else "read"
    for k in (1, 2):  # 1: read+write MN (norm fwd); 2: twice that (add+rmsnorm fwd)
        pool = [(torch.randn(k * M, N, device=device, dtype=dtype), torch.empty(k * M, N, device=device, dtype=dtype))
                for _ in range(2)]  # fmt: skip
        nbytes = 2 * k * M * N * pool[0][0].element_size()
        for flush in (timing_kw.get("l2_flush_mode", "read"), other):
            res = benchmark(lambda a, b: torch.mul(a, 1, out=b), pool, **{**timing_kw, "l2_flush_mode": flush})
            row = {"op": f"stream_copy_{k * M}x{N}", "shape": [k * M, N], "backend": "torch.mul(x,1,out=)",
                   "mode": "fwd" if flush == timing_kw.get("l2_flush_mode", "read") else f"fwd_{flush}_flush",
                   "bytes": nbytes, "ok": True, "median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms,
                   "cv": res.cv, "method": res.method, "l2_flush_mode": flush,
                   **sol_cols(nbytes, res.median_ms, bw)}  # fmt: skip
            rec.add("rows", row)
            print(f"[{elapsed():6.1f}s] {row['op']} {flush} flush {res.median_ms * 1e3:.1f} us "
                  f"sol={row['sol_calibrated']:.3f}", flush=True)  # fmt: skip


def bench_row(rec, op, backend, fn, mode, dtype, device, timing_kw, bw, args, seed):
    row = {"op": op.name, "shape": list(op.shape), "dtype": str(dtype).replace("torch.", ""), "backend": backend,
           "mode": mode, "bytes": op.bytes_fwd if mode == "fwd" else op.bytes_fwdbwd}  # fmt: skip
    t_start = time.perf_counter()
    try:
        data = make_inputs(op, dtype, device, seed)
        refs = reference_outputs(op, data, mode)
        torch_outs = run_mode(op.impls["torch"], *data, mode)
        row.update(check(fn, op, mode, data, refs, max_err(torch_outs, refs), device))
        del data, refs, torch_outs
        if row["ok"] or args.time_failures:
            pool = pool_for(op, dtype, device, mode, args.pool, seed)
            n_grads = 2 if op.kind == "add_rmsnorm" else 1
            params = make_inputs(op, dtype, device, seed)[1]
            res = benchmark(timed_fn(fn, mode, op.n_acts, params, n_grads), pool,
                            **{**timing_kw, "calls_per_graph": calls_for(row["bytes"], timing_kw)})  # fmt: skip
            row.update({"median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms, "cv": res.cv,
                        "method": res.method, "l2_flush_mode": getattr(res, "l2_flush_mode", None),
                        "host_launch_ms": res.host_ms,
                        "high_variance": res.high_variance})  # fmt: skip
            if device.type == "cuda":
                row.update(sol_cols(row["bytes"], res.median_ms, bw))
            del pool
    except Exception as exc:  # noqa: BLE001 - a failing backend is a row, never a crash
        row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        traceback.print_exc(limit=2)
    row["wall_s"] = round(time.perf_counter() - t_start, 2)
    rec.add("rows", row)
    print(f"[{elapsed():6.1f}s] {op.name:16s} {backend:16s} {mode:7s} ok={row.get('ok')} "
          f"ms={row.get('median_ms', float('nan')):.4f} sol={row.get('sol_calibrated', float('nan')):.3f} "
          f"{row.get('error', '')[:80]}", flush=True)  # fmt: skip
