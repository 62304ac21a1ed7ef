"""Benchmark solkit's RMSNorm, add+RMSNorm, LayerNorm and softmax kernels against torch and Liger.

For each op x backend {solkit, torch (eager), compile (torch.compile), liger} x mode {fwd, fwd+bwd}:

1. correctness first: fresh random inputs (never zeros), the allocator's free memory poisoned with
   NaN before the run, outputs and gradients compared with an fp32 reference; pass when the max
   error is at most 2x torch eager's own same-dtype error plus a small atol (a fraction of |ref|);
2. timing with ``solkit.harness.timing.benchmark`` (CUDA graphs, L2 flushed, rotating inputs);
3. bytes (the minimum of the kernel docstrings) and T_SOL on two bases: the copy bandwidth measured
   in this run (a 2 GiB ``copy_`` timed the same way, "calibrated") and the 4.8 TB/s datasheet.

A failing backend becomes a row with its error. The JSON is rewritten after every row, so a kill at
the time budget keeps what was measured. torch.compile rows run last, each op compiled once per mode,
and are skipped (with a row saying so) when the budget runs short.

    python3 benchmarks/kernels_norm.py --out results.json [--sweep] [--no-compile] [--budget-s 100]
    python3 benchmarks/kernels_norm.py --smoke   # CPU, Triton interpreter, tiny shapes: logic check only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from solkit.harness.timing import benchmark  # noqa: E402
from solkit.kernels._utils import sm_count, sum_partials  # noqa: E402
from solkit.kernels.layernorm import layernorm, layernorm_backward, layernorm_forward  # noqa: E402
from solkit.kernels.rmsnorm import add_rmsnorm, rmsnorm, rmsnorm_backward, rmsnorm_forward  # noqa: E402
from solkit.kernels.softmax import softmax, softmax_backward, softmax_forward  # noqa: E402
from solkit.sol.model import Ceilings, sol_fraction, t_sol  # noqa: E402

DATASHEET_BW = 4.8e12
#: Launcher sweep, per op and kernel: solkit launcher keyword arguments, the measured default first.
#: Wide softmax rows: the looped path against cooperative (segment, warps, programs per SM) variants.
_RMS_FWD = [dict(num_warps=8), dict(num_warps=4), dict(num_warps=16), dict(block_m=2, num_warps=8),
            dict(block_m=4, num_warps=16), dict(num_warps=8, maxnreg=32)]  # fmt: skip
_RMS_BWD = [
    dict(num_warps=16, programs_per_sm=2),
    dict(num_warps=16, programs_per_sm=2, prefetch=2),
    dict(num_warps=32, programs_per_sm=1, prefetch=2),
    dict(num_warps=8, programs_per_sm=2),
    dict(num_warps=8, programs_per_sm=2, prefetch=2),
]
_LOOPED = dict(coop=False, split=False)


def _split(segment, chunk, warps, per_sm, lookahead=1):
    return dict(split=dict(segment=segment, chunk=chunk, num_warps=warps, per_sm=per_sm, lookahead=lookahead))


# Wide rows: the looped path, the split-row path (default first), one cooperative variant (round 3a's best).
_WIDE_FWD = [_split(16384, 8192, 16, 2), _LOOPED, _split(32768, 8192, 16, 2), _split(8192, 8192, 16, 2),
             _split(32768, 16384, 32, 1), _split(16384, 4096, 8, 4), _split(16384, 8192, 16, 2, 0),
             _split(65536, 8192, 16, 2, 0), _split(65536, 16384, 32, 1, 0),
             dict(coop=True, coop_segment=4096, num_warps=8, coop_per_sm=4)]  # fmt: skip
_WIDE_BWD = [_split(8192, 4096, 16, 2), _LOOPED, _split(16384, 4096, 16, 2), _split(4096, 4096, 16, 2),
             _split(16384, 8192, 32, 1), _split(8192, 2048, 8, 4), _split(8192, 4096, 16, 2, 0),
             _split(32768, 8192, 32, 1, 0)]  # fmt: skip
#: Round 3b's extra forward variants around the defaults set from round 3a (more rows per program share
#: the parameter loads).
FWD_EXTRA = {
    "layernorm": [dict(block_m=2, num_warps=8), dict(block_m=4, num_warps=16), dict(block_m=4, num_warps=8)],
    "rmsnorm": [dict(block_m=2, num_warps=8), dict(block_m=4, num_warps=8), dict(num_warps=4)],
}
SWEEP = {
    "softmax_vocab": {"fwd": _WIDE_FWD, "bwd": _WIDE_BWD},
    "softmax_256k": {"fwd": _WIDE_FWD, "bwd": _WIDE_BWD},
    "layernorm": {
        "fwd": [
            dict(num_warps=4, one_pass=False),
            dict(num_warps=4, one_pass=True),
            dict(num_warps=8, one_pass=True),
            dict(num_warps=8, one_pass=False),
            dict(num_warps=2, one_pass=True),
            dict(block_m=2, num_warps=8, one_pass=True),
        ],
        "bwd": [
            dict(num_warps=8, programs_per_sm=2),
            dict(num_warps=8, programs_per_sm=2, prefetch=2),
            dict(num_warps=16, programs_per_sm=2),
            dict(num_warps=32, programs_per_sm=1, prefetch=2),
            dict(num_warps=32, programs_per_sm=1),
        ],
    },
    "rmsnorm": {"fwd": _RMS_FWD, "bwd": _RMS_BWD},
    "rmsnorm_fwd_extra": {"fwd": FWD_EXTRA["rmsnorm"]},
    "layernorm_fwd_extra": {"fwd": FWD_EXTRA["layernorm"]},
    "add_rmsnorm": {"fwd": _RMS_FWD, "bwd": _RMS_BWD},
    "softmax": {
        "fwd": [dict(num_warps=8), dict(num_warps=4), dict(num_warps=16)],
        "bwd": [dict(num_warps=8), dict(num_warps=4)],
    },  # fmt: skip
}
#: dW partial-sum reduction (P = 2 programs x 132 SMs rows): sum_partials keyword arguments.
PARTIAL_SUM_SWEEP = [dict(block_p=32, block_c=None, num_warps=4), dict(block_p=128, block_c=32, num_warps=4),
                     dict(block_p=64, block_c=64, num_warps=8), dict(block_p=256, block_c=16, num_warps=8),
                     dict(block_p=512, block_c=8, num_warps=8), dict(block_p=128, block_c=16, num_warps=4)]  # fmt: skip
SHAPES = {"norm": (8192, 4096), "softmax": {"": (8192, 4096), "_vocab": (4096, 128256), "_256k": (1024, 262144)}}
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


def make_ops(shapes: dict, dtype: torch.dtype) -> list[Op]:
    e = torch.tensor([], dtype=dtype).element_size()
    ops = []
    M, N = shapes["norm"]
    MN = M * N
    ops.append(Op(
        "rmsnorm", "rmsnorm", (M, N), 1, 1,
        bytes_fwd=2 * MN * e + N * e, bytes_fwdbwd=5 * MN * e + 3 * N * e + 8 * M,
        reference=lambda x, w: hf_rmsnorm(x, w),
        impls={"solkit": lambda x, w: rmsnorm(x, w, EPS), "torch": hf_rmsnorm,
               "torch_F.rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)},
    ))  # fmt: skip
    ops.append(Op(
        "add_rmsnorm", "add_rmsnorm", (M, N), 2, 1,
        bytes_fwd=4 * MN * e + N * e, bytes_fwdbwd=8 * MN * e + 3 * N * e + 8 * M,
        reference=eager_add_rmsnorm,
        impls={"solkit": lambda x, r, w: add_rmsnorm(x, r, w, EPS), "torch": eager_add_rmsnorm},
    ))  # fmt: skip
    ops.append(Op(
        "layernorm", "layernorm", (M, N), 1, 2,
        bytes_fwd=2 * MN * e + 2 * N * e, bytes_fwdbwd=5 * MN * e + 5 * N * e + 16 * M,
        reference=lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
        impls={"solkit": lambda x, w, b: layernorm(x, w, b, EPS),
               "torch": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS)},
    ))  # fmt: skip
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
    M, N = SHAPES["norm"]
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


def sweep_cases(op, dtype, device, key=None):
    """``[(kernel, config, call(config) -> outputs, bytes, fp32 references)]`` for one op's launcher sweep.

    The references are fp32 computations on the same (upcast) inputs the kernels get; the backward
    kernels get the saved statistics of the default forward."""
    e = torch.tensor([], dtype=dtype).element_size()
    M, N = op.shape
    acts, params, grads = make_inputs(op, dtype, device, 7)
    x, dy = acts[0], grads[0]
    up = lambda ts: [t.float().requires_grad_() for t in ts]  # noqa: E731
    cfgs = SWEEP.get(key or op.name) or (SWEEP["softmax_vocab"] if op.kind == "softmax" and N > 16384 else {})
    cases = []
    if op.kind in ("rmsnorm", "add_rmsnorm"):
        res = acts[1] if op.kind == "add_rmsnorm" else None
        ds = grads[1] if op.kind == "add_rmsnorm" else None
        w = params[0]
        _, s, rstd = rmsnorm_forward(x, w, residual=res)
        xs = s if s is not None else x
        k = 2 if res is not None else 1
        ref_fwd = as_tuple(op.reference(*[t.float() for t in acts], w.float()))
        ref_fwd = ref_fwd[::-1] if res is not None else ref_fwd  # launcher order: (y, s)
        xs32, w32 = up([xs, w])
        dx32, dw32 = torch.autograd.grad(hf_rmsnorm(xs32, w32), [xs32, w32], dy.float())
        ref_bwd = (dx32 + ds.float() if ds is not None else dx32, dw32)
        fwd_bytes = 2 * k * M * N * e + N * e + 4 * M
        bwd_bytes = (3 + (ds is not None)) * M * N * e + 4 * M + 2 * N * e
        fwd = lambda c: rmsnorm_forward(x, w, residual=res, **c)[: 2 if res is not None else 1]  # noqa: E731
        bwd = lambda c: rmsnorm_backward(dy, xs, w, rstd, ds=ds, **c)  # noqa: E731
    elif op.kind == "layernorm":
        _, mean, rstd = layernorm_forward(x, *params)
        ref_fwd = (F.layer_norm(x.float(), (N,), *[p.float() for p in params], EPS),)
        x32, w32, b32 = up([x, *params])
        ref_bwd = torch.autograd.grad(F.layer_norm(x32, (N,), w32, b32, EPS), [x32, w32, b32], dy.float())
        fwd_bytes, bwd_bytes = 2 * M * N * e + 2 * N * e + 8 * M, 3 * M * N * e + 8 * M + 3 * N * e
        fwd = lambda c: layernorm_forward(x, *params, EPS, **c)[:1]  # noqa: E731
        bwd = lambda c: layernorm_backward(dy, x, params[0], mean, rstd, **c)  # noqa: E731
    else:
        y = softmax_forward(x)
        ref_fwd = (torch.softmax(x.float(), -1),)
        y32 = y.float()
        ref_bwd = (y32 * (dy.float() - (y32 * dy.float()).sum(-1, keepdim=True)),)
        fwd_bytes, bwd_bytes = 2 * M * N * e, 3 * M * N * e
        fwd = lambda c: (softmax_forward(x, **c),)  # noqa: E731
        bwd = lambda c: (softmax_backward(dy, y, **c),)  # noqa: E731
    for kernel, call, nbytes, refs in (("fwd", fwd, fwd_bytes, ref_fwd), ("bwd", bwd, bwd_bytes, ref_bwd)):
        refs = tuple(r.detach() for r in refs)
        cases += [(kernel, c, call, nbytes, refs) for c in cfgs.get(kernel, [])]
    return cases


def variant_check(outs, refs) -> dict:
    """A sweep variant's outputs against fp32 references: finite, and max error at most 2^-6 of max|ref|
    (a few bf16 ulps at the largest value; the table rows apply the strict budget to the defaults)."""
    errs = [float((o.float() - r).abs().max()) for o, r in zip(outs, refs)]
    tols = [float(r.abs().max()) / 64 + 1e-6 for r in refs]
    finite = all(bool(torch.isfinite(o).all()) for o in outs)
    return {"ok": finite and all(e <= t for e, t in zip(errs, tols)), "max_abs_err": errs, "tol": tols}


def sweep(rec, ops, dtype, device, timing_kw, bw, args, key=None):
    """Time the solkit launchers alone over the SWEEP configs (fwd and bwd kernels separately), each
    checked first; a variant whose checked (second) call is slow (cooperative programs not all
    resident, waits running into their cap) is reported and not timed."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for op in ops:
        if elapsed() > args.sweep_budget_s:
            return
        try:
            cases = sweep_cases(op, dtype, device, key)
        except Exception as exc:  # noqa: BLE001
            rec.add("sweep", {"op": op.name, "error": f"setup: {type(exc).__name__}: {str(exc)[:200]}"})
            continue
        for kernel, cfg, call, nbytes, refs in cases:
            if elapsed() > args.sweep_budget_s:
                return
            row = {"op": op.name, "shape": list(op.shape), "kernel": kernel, "config": cfg, "bytes": nbytes}
            try:
                call(cfg)  # compiles
                poison_free_memory(4 * nbytes, device)
                sync()
                t0 = time.perf_counter()
                outs = call(cfg)
                sync()
                row["checked_call_s"] = round(time.perf_counter() - t0, 4)
                row.update(variant_check(outs, refs))
                del outs
                if device.type == "cuda" and row["checked_call_s"] > 0.5:
                    raise RuntimeError("a call took over 0.5 s (cooperative waits timing out?); not timed")
                kw = {**timing_kw, "calls_per_graph": calls_for(nbytes, timing_kw)}
                r = benchmark(lambda c=cfg, f=call: f(c), **kw)
                row.update({"median_ms": r.median_ms, "q1_ms": r.q1_ms, "q3_ms": r.q3_ms, "cv": r.cv,
                            "method": r.method})  # fmt: skip
                if device.type == "cuda":
                    row.update(sol_cols(nbytes, r.median_ms, bw))
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rec.add("sweep", row)
            print(f"[{elapsed():6.1f}s] sweep {op.name:14s} {kernel} {cfg} ok={row.get('ok')} "
                  f"us={row.get('median_ms', float('nan')) * 1e3:.1f} "
                  f"sol={row.get('sol_calibrated', float('nan')):.3f} {row.get('error', '')[:80]}",
                  flush=True)  # fmt: skip


def adopt_wide_softmax(rec) -> None:
    """Set the wide-row softmax defaults (``SPLIT_CONFIG``) in this process to the sweep's fastest
    checked choice per direction, by total time over the wide shapes measured; the table rows that
    follow then measure exactly that configuration, and the JSON records it (``adopted``)."""
    from solkit.kernels import softmax as sm

    for kernel, direction in (("fwd", "fwd"), ("bwd", "bwd")):
        totals = {}
        for r in rec.doc["sweep"]:
            if r["op"].startswith("softmax_") and r.get("kernel") == kernel and r.get("ok") and "median_ms" in r:
                cfg = r["config"]
                if cfg.get("coop"):
                    continue
                key = json.dumps(cfg.get("split") if cfg.get("split") else "looped", sort_keys=True)
                totals.setdefault(key, []).append(r["median_ms"])
        n_shapes = max((len(v) for v in totals.values()), default=0)
        complete = {k: sum(v) for k, v in totals.items() if len(v) == n_shapes}
        if not complete:
            continue
        best = json.loads(min(complete, key=complete.get))
        if best == "looped":
            sm.SPLIT_CONFIG[direction]["default"] = False
        else:
            sm.SPLIT_CONFIG[direction].update(best, default=True)
        rec.doc.setdefault("adopted", {})[direction] = {"split_config": dict(sm.SPLIT_CONFIG[direction]),
                                                         "total_ms": complete}  # fmt: skip
        print(f"adopted wide softmax {direction}: {sm.SPLIT_CONFIG[direction]}", flush=True)


def partial_sum_sweep(rec, dtype, device, timing_kw, bw, args) -> None:
    """The dW (and dB) partial-sum reduction alone: [2 x SMs, N] fp32 buffers, N = 4096 and 8192."""
    for n_cols in (4096, 8192):
        part = torch.randn(2 * sm_count(torch.empty(0, device=device)), n_cols, device=device)
        ref = part.double().sum(0)
        nbytes = part.numel() * 4 + n_cols * torch.tensor([], dtype=dtype).element_size()
        for cfg in PARTIAL_SUM_SWEEP:
            if elapsed() > args.sweep_budget_s:
                return
            row = {"op": f"sum_partials_{part.shape[0]}x{n_cols}", "kernel": "reduce", "config": cfg, "bytes": nbytes}
            try:
                out = sum_partials(part, dtype, **cfg)
                row["ok"] = bool(torch.allclose(out.double(), ref, rtol=1e-2, atol=1e-2))
                r = benchmark(lambda c=cfg, t=part: sum_partials(t, dtype, **c), **timing_kw)
                row.update({"median_ms": r.median_ms, "cv": r.cv, "method": r.method})
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rec.add("sweep", row)
            print(f"[{elapsed():6.1f}s] sweep {row['op']} {cfg} ok={row.get('ok')} "
                  f"us={row.get('median_ms', float('nan')) * 1e3:.2f}", flush=True)  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="", help="JSON path")
    p.add_argument("--budget-s", type=float, default=100.0, help="stop starting new work after this many seconds")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-ops", default="", help="comma list of ops to torch.compile (default: all)")
    p.add_argument("--compile-first", action="store_true", help="run the torch.compile rows before the rest")
    p.add_argument("--compile-reserve-s", type=float, default=12.0, help="no compile starts this close to the budget")
    p.add_argument("--sweep", action="store_true", help="also time solkit launchers over a few configs")
    p.add_argument("--only-sweep", action="store_true")
    p.add_argument("--sweep-budget-s", type=float, default=35.0, help="stop the sweep after this many seconds")
    p.add_argument("--sweep-ops", default=",".join(list(SWEEP) + ["partial_sum"]),
                   help="in order; partial_sum = the dW reduction alone")  # fmt: skip
    p.add_argument("--adopt-wide-softmax", action="store_true",
                   help="use the sweep's fastest wide-row softmax config for the table rows (recorded)")  # fmt: skip
    p.add_argument("--ops", default="", help="comma list of op names to run (default: all)")
    p.add_argument("--backends", default="", help="comma list of backends for the table (default: all)")
    p.add_argument("--nograph", action="store_true", help="also time eager forwards without graphs (host overhead)")
    p.add_argument("--method", default="auto", help="timing method (auto: graph_events under 0.1 ms, else events)")
    p.add_argument("--l2-flush", default="read", choices=("read", "write"), help="L2 flush between calls")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--pool", type=int, default=2, help="rotating input sets per timing")
    p.add_argument("--time-failures", action="store_true", help="time backends that failed the check too")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    args = p.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.smoke:
        shapes = {"norm": (8, 96), "softmax": {"": (8, 96), "_wide": (2, 20000)}}
        timing_kw = dict(method="wall", reps=2, trials=1, warmup=1)
    else:
        shapes = SHAPES
        timing_kw = dict(method=args.method, reps=args.reps, trials=args.trials, warmup=3, calls_per_graph=10,
                         l2_flush_mode=args.l2_flush)  # fmt: skip
    meta = {
        "benchmark": "kernels_norm",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "dtype": str(dtype).replace("torch.", ""),
        "timing": {k: v for k, v in timing_kw.items()},
        "timing_protocol": (
            f"solkit.harness.timing.benchmark(method={timing_kw['method']!r}, l2_flush_mode="
            f"{timing_kw.get('l2_flush_mode')!r}): 'auto' = per-call CUDA events captured as nodes inside a CUDA "
            "graph ('graph_events', the harness's median) for calls under 0.1 ms, CUDA events around eager "
            "calls otherwise; L2 flushed before every call by a read sweep of 2x L2 (leaves L2 clean); two "
            "rotating input sets; the resolved method is in each row"
        ),
        "criteria": "max|out-ref| <= 2*max|torch_eager-ref| + 4e-3*max|ref|, ref = fp32 math on upcast inputs",
    }  # fmt: skip
    try:
        import liger_kernel

        liger = _liger()
        try:
            from importlib.metadata import version

            meta["liger"] = version("liger_kernel")
        except Exception:  # noqa: BLE001 - a copied package may lack metadata
            meta["liger"] = getattr(liger_kernel, "__version__", None) or "importable"
    except Exception as exc:  # noqa: BLE001
        liger, meta["liger"] = {}, f"unavailable: {type(exc).__name__}: {exc}"
    rec = Recorder(args.out, meta)

    bw = None
    if device.type == "cuda":
        bw, copy_info = measure_copy_bandwidth(device, timing_kw)
        note = "calibrated basis = 1 GiB bf16 copy_ (as solkit calibrate), CUDA events, read+write counted"
        rec.doc["bandwidth"] = {"copy_measured_Bps": bw, "copy_runs": copy_info, "datasheet_Bps": DATASHEET_BW,
                                "copy_bytes": 2 * 2**30, "note": note}  # fmt: skip
        print(f"copy bandwidth {bw / 1e12:.3f} TB/s (events)", flush=True)
        try:
            same_bytes_stream_rows(rec, dtype, device, timing_kw, bw)
        except Exception as exc:  # noqa: BLE001
            print(f"stream rows failed: {exc}", flush=True)

    ops = make_ops(shapes, dtype)
    for i, op in enumerate(ops):
        op.seed = 1000 * (i + 1)
    if args.ops:
        wanted = set(args.ops.split(","))
        ops = [o for o in ops if o.name in wanted]
    for op in ops:
        if op.kind in liger:
            op.impls["liger"] = liger[op.kind]
    compile_ops = [o for o in ops if not args.compile_ops or o.name in args.compile_ops.split(",")]
    run_compile = not args.no_compile and (device.type == "cuda" or os.environ.get("KN_SMOKE_COMPILE") == "1")
    if run_compile and args.compile_first:
        compile_rows(rec, compile_ops, dtype, device, timing_kw, bw, args)
        compile_ops = []
    if args.sweep or args.only_sweep:
        by_name = {o.name: o for o in ops}
        names = [o.name for o in ops] + ["partial_sum"] if args.smoke else args.sweep_ops.split(",")
        for name in names:  # in the order given, the most informative first
            if name == "partial_sum":
                partial_sum_sweep(rec, dtype, device, timing_kw, bw, args)
            elif name in by_name:
                sweep(rec, [by_name[name]], dtype, device, timing_kw, bw, args)
            elif name.endswith("_fwd_extra") and name.removesuffix("_fwd_extra") in by_name:
                sweep(rec, [by_name[name.removesuffix("_fwd_extra")]], dtype, device, timing_kw, bw, args, key=name)
    if args.adopt_wide_softmax:
        adopt_wide_softmax(rec)
    if args.only_sweep:
        rec.flush()
        return 0

    modes = ("fwd", "fwdbwd")
    backends = set(args.backends.split(",")) if args.backends else None
    for op in ops:
        for backend, fn in op.impls.items():
            if backends is not None and backend not in backends:
                continue
            for mode in modes:
                if elapsed() > args.budget_s:
                    rec.add("rows", {"op": op.name, "backend": backend, "mode": mode, "ok": None,
                                     "error": "skipped: time budget"})  # fmt: skip
                    continue
                bench_row(rec, op, backend, fn, mode, dtype, device, timing_kw, bw, args, seed=op.seed)
    if run_compile:
        compile_rows(rec, compile_ops, dtype, device, timing_kw, bw, args)
    if args.nograph and device.type == "cuda" and elapsed() < args.budget_s:
        nograph_rows(rec, ops, dtype, device, timing_kw, bw)
    rec.flush()
    print_table(rec.doc)
    return 0


def nograph_rows(rec, ops, dtype, device, timing_kw, bw) -> None:
    """Forward timed without CUDA graphs (CUDA events around each eager call): launch and host overhead
    show up here, which graph replay hides. Correctness was checked in the graph rows."""
    for op in ops:
        if op.name not in ("rmsnorm", "layernorm", "softmax"):
            continue
        for backend in ("solkit", "liger"):
            if backend not in op.impls:
                continue
            row = {"op": op.name, "shape": list(op.shape), "backend": backend, "mode": "fwd_nograph",
                   "bytes": op.bytes_fwd}  # fmt: skip
            try:
                pool = pool_for(op, dtype, device, "fwd", 2, op.seed)
                params = make_inputs(op, dtype, device, op.seed)[1]
                fn = timed_fn(op.impls[backend], "fwd", op.n_acts, params, 1)
                res = benchmark(fn, pool, **{**timing_kw, "method": "events"})
                row.update({"ok": True, "median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms,
                            "cv": res.cv, "method": res.method})  # fmt: skip
                row.update(sol_cols(op.bytes_fwd, res.median_ms, bw))
            except Exception as exc:  # noqa: BLE001
                row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            rec.add("rows", row)
            ms = row.get("median_ms", float("nan"))
            print(f"[{elapsed():6.1f}s] {op.name:16s} {backend:16s} fwd_nograph ms={ms:.4f}", flush=True)


def compile_rows(rec, ops, dtype, device, timing_kw, bw, args) -> None:
    """torch.compile of the eager baseline, once per op and mode, while the budget allows."""
    torch._dynamo.config.cache_size_limit = 64
    for op in ops:
        for mode in ("fwd", "fwdbwd"):
            # A compile costs seconds; start one only with room left for it.
            if elapsed() > args.budget_s - args.compile_reserve_s:
                rec.add("rows", {"op": op.name, "backend": "compile", "mode": mode, "ok": None,
                                 "error": "skipped: time budget"})  # fmt: skip
                continue
            t0 = time.perf_counter()
            fn = torch.compile(op.impls["torch"], dynamic=False)
            bench_row(rec, op, "compile", fn, mode, dtype, device, timing_kw, bw, args, seed=op.seed)
            print(f"    compile+check+time {time.perf_counter() - t0:.1f}s", flush=True)


def print_table(doc) -> None:
    rows = [r for r in doc["rows"] if "median_ms" in r or r.get("error")]
    print(f"\n{doc['device']}  copy {doc.get('bandwidth', {}).get('copy_measured_Bps', 0) / 1e12:.3f} TB/s  "
          f"torch {doc['torch']} triton {doc['triton']} liger {doc.get('liger')}")  # fmt: skip
    print(f"{'op':16s} {'mode':7s} {'backend':16s} {'ok':5s} {'ms':>9s} {'SOL(cal)':>8s} {'SOL(4.8)':>8s} {'TB/s':>6s}")
    for r in rows:
        print(f"{r['op']:16s} {r['mode']:7s} {r['backend']:16s} {str(r.get('ok')):5s} "
              f"{r.get('median_ms', float('nan')):9.4f} {r.get('sol_calibrated', float('nan')):8.3f} "
              f"{r.get('sol_datasheet', float('nan')):8.3f} {r.get('achieved_TBps', float('nan')):6.2f} "
              f"{r.get('error', '')[:60]}")  # fmt: skip


TARGETS = {"fwd": 0.92, "fwdbwd": 0.80}


def render_markdown(doc) -> str:
    """The docs table of a result JSON: solkit against the competition per op and mode, then the sweep's
    fastest checked config per op and kernel."""
    by = {}
    for r in doc["rows"]:
        if r.get("mode") in TARGETS and r.get("ok") is not None:
            by.setdefault((r["op"], r["mode"]), {})[r["backend"]] = r

    def us(r):
        if not r or ("median_ms" not in r and r.get("ok")):
            return "-"
        return f"{r['median_ms'] * 1e3:.1f}" + ("" if r.get("ok") else " (fails)") if "median_ms" in r else "fails"

    out = ["| op (bf16) | mode | solkit µs | SOL cal. | SOL 4.8 | target | Liger µs | torch.compile µs | eager µs "
           "| solkit vs faster of compile/Liger |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (op, mode), b in [(k, v) for k, v in by.items()] + [
        ((f"{op} (looped path)", mode), {**b, "solkit": b["solkit_looped"]}) for (op, mode), b in by.items()
        if "solkit_looped" in b
    ]:  # fmt: skip
        sk = b.get("solkit")
        if not sk or "median_ms" not in sk:
            continue
        rivals = [b[k]["median_ms"] for k in ("liger", "compile") if k in b and b[k].get("ok") and "median_ms" in b[k]]
        verdict = "-" if not rivals else (f"{'yes' if sk['median_ms'] <= min(rivals) else 'no'} "
                                          f"({min(rivals) / sk['median_ms']:.2f}x)")  # fmt: skip
        met = "met" if sk.get("sol_calibrated", 0) >= TARGETS[mode] else "not met"
        shape = "x".join(map(str, sk.get("shape", [])))
        out.append(f"| {op} {shape} | {mode} | {us(sk)} | {sk.get('sol_calibrated', float('nan')):.3f} "
                   f"| {sk.get('sol_datasheet', float('nan')):.3f} | >={TARGETS[mode]}: {met} | {us(b.get('liger'))} "
                   f"| {us(b.get('compile'))} | {us(b.get('torch'))} | {verdict} |")  # fmt: skip
    best = {}
    for r in doc.get("sweep", []):
        if r.get("ok") and "median_ms" in r:
            key = (r["op"], r["kernel"])
            if key not in best or r["median_ms"] < best[key]["median_ms"]:
                best[key] = r
    out += ["", "| sweep: op | kernel | fastest config | µs | SOL cal. of its bytes |", "|---|---|---|---|---|"]
    for (op, kernel), r in best.items():
        out.append(f"| {op} | {kernel} | `{r['config']}` | {r['median_ms'] * 1e3:.1f} "
                   f"| {r.get('sol_calibrated', float('nan')):.3f} |")  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--render":  # python3 kernels_norm.py --render result.json
        with open(sys.argv[2]) as fh:
            print(render_markdown(json.load(fh)))
        sys.exit(0)
    sys.exit(main())
