"""Norm backward sweep: RMSNorm, add+RMSNorm and LayerNorm backward launch variants at Llama shapes (bf16).

What limits the persistent norm backward (dX, then dW partial sums over strided row blocks, then one
reduction)? Each variant of ``rmsnorm_backward`` / ``layernorm_backward`` (launcher keywords: warps, programs
per SM, rows per block, prefetch depth, ``w_reload``, ``balanced`` grid, ``fused_reduce`` of the dW partials
after a grid barrier) is first checked against a float64 reference (dx, dw, db: max error at most twice eager
PyTorch's bf16 error plus ``4e-3 x max|ref|``), then timed alone ("bwd": the kernel plus its reduction) and
after solkit's default forward ("fwdbwd": the launchers back to back, no autograd) with the harness protocol
(``solkit.harness.timing.benchmark(method="auto", l2_flush_mode="read")``: per-call CUDA events inside a CUDA
graph for calls under 0.1 ms; two rotating input sets). SOL on the copy bandwidth measured in the same run and
on the 4.8 TB/s datasheet; registers and spills of every compiled backward kernel are recorded.

    python3 benchmarks/kernels_normbwd.py --warm 0/4                 # compile a quarter of the variants
    python3 benchmarks/kernels_normbwd.py --out nb.json --budget-s 60 [--ops rmsnorm,layernorm]
    python3 benchmarks/kernels_normbwd.py --smoke                    # CPU interpreter, tiny shapes
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from kernels_norm_common import (  # noqa: E402
    EPS,
    Recorder,
    elapsed,
    make_inputs,
    make_ops,
    measure_copy_bandwidth,
    poison_free_memory,
    sol_cols,
)

from solkit.harness.timing import benchmark  # noqa: E402
from solkit.kernels import layernorm as ln_mod  # noqa: E402
from solkit.kernels import norm_backward as nb_mod  # noqa: E402
from solkit.kernels.layernorm import layernorm_backward, layernorm_forward  # noqa: E402
from solkit.kernels.rmsnorm import rmsnorm_backward, rmsnorm_forward  # noqa: E402

SHAPES = {"norm": {"": (8192, 4096), "_70b": (8192, 8192)}, "softmax": {}}
SMOKE_SHAPES = {"norm": {"": (40, 96), "_70b": (12, 300)}, "softmax": {}}


def _v(**kw) -> dict:
    return kw


_DEEP = _v(block_m=2, num_warps=32, programs_per_sm=1, prefetch=2)  # 4 rows in flight an SM, no spills (ptxas)
#: Backward launcher variants per op; ``{}`` (the committed default) first.
VARIANTS = {
    "rmsnorm": [
        {},
        _v(balanced=True),
        _v(fused_reduce=True),
        _v(fused_reduce=True, balanced=True),
        _v(prefetch=2, w_reload=True),
        _v(prefetch=2, w_reload=True, fused_reduce=True, balanced=True),
        _DEEP,
        {**_DEEP, "w_reload": True},
        {**_DEEP, "fused_reduce": True, "balanced": True},
        _v(block_m=2, num_warps=32, programs_per_sm=1, prefetch=1, w_reload=True),
        _v(num_warps=32, programs_per_sm=1, prefetch=2, w_reload=True),
        _v(num_warps=16, programs_per_sm=1, prefetch=2),
        _v(partial_sum={"block_p": 64, "block_c": 64, "num_warps": 4}),
        _v(two_pass=True),
        _v(two_pass=True, fused_reduce=True, balanced=True),
        _v(two_pass=True, num_warps=8, programs_per_sm=4),
        _v(two_pass=True, num_warps=8, programs_per_sm=2),
    ],
    "add_rmsnorm": [
        {},
        _v(fused_reduce=True, balanced=True),
        _DEEP,
        {**_DEEP, "fused_reduce": True, "balanced": True},
        _v(two_pass=True, num_warps=16, fused_reduce=True, balanced=True),
    ],
    "layernorm": [
        {},
        _v(balanced=True),
        _v(fused_reduce=True),
        _v(fused_reduce=True, balanced=True),
        _v(num_warps=16),
        _v(prefetch=2, w_reload=True),
        _DEEP,
        {**_DEEP, "fused_reduce": True, "balanced": True},
        _v(num_warps=32, programs_per_sm=1, prefetch=2, w_reload=True),
        _v(num_warps=16, programs_per_sm=1, prefetch=2),
    ],
    "rmsnorm_70b": [{}, _v(fused_reduce=True), _v(fused_reduce=True, balanced=True), _v(block_m=2, prefetch=1)],
    "layernorm_70b": [{}, _v(fused_reduce=True), _v(fused_reduce=True, balanced=True), _v(prefetch=1)],
}


def setup(op, dtype, device, seed):
    """Backward inputs (x or the sum s, the weight/bias, saved statistics, dy, ds) and the fp64 references."""
    acts, params, grads = make_inputs(op, dtype, device, seed)
    if op.kind == "layernorm":
        _, mean, rstd = layernorm_forward(acts[0], *params, EPS)
        return {"x": acts[0], "params": params, "stats": (mean, rstd), "dy": grads[0], "ds": None}
    x = acts[0] + acts[1] if op.kind == "add_rmsnorm" else acts[0]
    _, _, rstd = rmsnorm_forward(x, params[0], EPS)
    ds = grads[0] if op.kind == "add_rmsnorm" else None
    return {"x": x, "params": params, "stats": (rstd,), "dy": grads[-1], "ds": ds}


def references(op, d):
    """(float64 grads, eager bf16 grads) of x (+ ds), w (and b) for the norm applied to d['x']."""
    out = []
    for up in (True, False):
        leaves = [t.detach().double() if up else t.detach().clone() for t in [d["x"], *d["params"]]]
        leaves = [t.requires_grad_() for t in leaves]
        if op.kind == "layernorm":
            y = torch.nn.functional.layer_norm(leaves[0], (leaves[0].shape[1],), *leaves[1:], EPS)
        else:
            y = op.reference(leaves[0], leaves[1]) if op.kind == "rmsnorm" else op.reference(leaves[0], 0 * leaves[0],
                                                                                             leaves[1])[1]  # fmt: skip
        gs = list(torch.autograd.grad(y, leaves, d["dy"].double() if up else d["dy"]))
        if d["ds"] is not None:
            gs[0] = gs[0] + (d["ds"].double() if up else d["ds"])
        out.append(gs)
    return out


def launcher(op, d, cfg, with_forward=False):
    """The backward (optionally after the default forward) under launcher keywords ``cfg``."""
    w = d["params"][0]
    if op.kind == "layernorm":

        def run(x, dy, ds):
            stats = layernorm_forward(x, *d["params"], EPS)[1:] if with_forward else d["stats"]
            return layernorm_backward(dy, x, w, *stats, **cfg)

        return run

    def run(x, dy, ds):
        stats = rmsnorm_forward(x, w, EPS)[2:] if with_forward else d["stats"]
        return rmsnorm_backward(dy, x, w, *stats, ds=ds, **cfg)

    return run


def check(outs, ref, eager) -> dict:
    errs = [float((o.double() - r).abs().max()) for o, r in zip(outs, ref)]
    budget = [2 * float((e.double() - r).abs().max()) + 4e-3 * float(r.abs().max()) for e, r in zip(eager, ref)]
    finite = all(bool(torch.isfinite(o).all()) for o in outs)
    return {"ok": finite and all(e <= b for e, b in zip(errs, budget)), "max_abs_err": errs, "err_budget": budget}


def bytes_of(op, mode, e: int) -> float:
    """Backward alone: read x, dy (ds), stats and w, write dx and dw (db); fwdbwd: the op's training bytes."""
    if mode == "fwdbwd":
        return op.bytes_fwdbwd
    M, N = op.shape
    n_params = 2 if op.kind == "layernorm" else 1
    acts = 4 if op.kind == "add_rmsnorm" else 3
    stats = 8 if op.kind == "layernorm" else 4
    return acts * M * N * e + (1 + n_params) * N * e + stats * M


def sweep_op(rec, op, dtype, device, timing_kw, bw, budget_s, modes) -> None:
    d = setup(op, dtype, device, 7)
    ref, eager = references(op, d)
    pool = []
    for k in range(2):
        dk = setup(op, dtype, device, 50 + k)
        pool.append((dk["x"], dk["dy"], dk["ds"]))
    for cfg in VARIANTS[op.name]:
        for mode in modes:
            if elapsed() > budget_s:
                rec.add("sweep", {"op": op.name, "config": cfg, "mode": mode, "error": "skipped: time budget"})
                continue
            row = {"op": op.name, "shape": list(op.shape), "mode": mode, "config": cfg,
                   "bytes": bytes_of(op, mode, d["x"].element_size())}  # fmt: skip
            try:
                fn = launcher(op, d, cfg, with_forward=mode == "fwdbwd")
                fn(d["x"], d["dy"], d["ds"])  # compile (or load from the cache)
                poison_free_memory(8 * op.shape[0] * op.shape[1], device)
                outs = [t for t in fn(d["x"], d["dy"], d["ds"]) if t is not None]
                row.update(check(outs, ref, eager))
                if row["ok"]:
                    r = benchmark(fn, pool, **timing_kw)
                    row.update({"median_ms": r.median_ms, "q1_ms": r.q1_ms, "q3_ms": r.q3_ms, "cv": r.cv,
                                "method": r.method})  # fmt: skip
                    if device.type == "cuda":
                        row.update(sol_cols(row["bytes"], r.median_ms, bw))
            except Exception as exc:  # noqa: BLE001 - a failing variant is a row, never a crash
                row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            rec.add("sweep", row)
            us, sol = row.get("median_ms", float("nan")) * 1e3, row.get("sol_calibrated", float("nan"))
            print(f"[{elapsed():6.1f}s] {op.name:14s} {mode:6s} {cfg} ok={row.get('ok')} us={us:.2f} sol={sol:.3f} "
                  f"{row.get('error', '')[:99]}", flush=True)  # fmt: skip


def kernel_registers() -> list[dict]:
    """Registers and spills of every backward kernel this process compiled, with its specialisation key."""
    out = []
    for jit_fn in (nb_mod._rmsnorm_bwd_kernel, ln_mod._layernorm_bwd_kernel):
        try:
            for entry in getattr(jit_fn, "device_caches", {}).values():
                for key, k in entry[0].items():
                    k._init_handles()
                    out.append({"kernel": k.name, "n_regs": k.n_regs, "n_spills": k.n_spills,
                                "num_warps": k.metadata.num_warps, "key": str(key)[-500:]})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            out.append({"kernel": getattr(jit_fn, "__name__", "?"), "error": f"{type(exc).__name__}: {exc}"[:200]})
    return out


def warm(ops, dtype, device, part: str) -> None:
    """Compile this process's share (``k/n``) of the variants' kernels into Triton's disk cache."""
    k, n = map(int, part.split("/"))
    jobs = [(op, cfg) for op in ops for cfg in VARIANTS.get(op.name, [])]
    data = {}
    for i, (op, cfg) in enumerate(jobs):
        if i % n != k:
            continue
        d = data.setdefault(op.name, setup(op, dtype, device, 7))
        try:
            launcher(op, d, cfg)(d["x"], d["dy"], d["ds"])
        except Exception as exc:  # noqa: BLE001
            print(f"warm {op.name} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"[{elapsed():6.1f}s] warm {part} done", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--budget-s", type=float, default=60.0, help="start no new variant after this many seconds")
    p.add_argument("--ops", default="rmsnorm,layernorm,add_rmsnorm,rmsnorm_70b,layernorm_70b")
    p.add_argument("--modes", default="bwd,fwdbwd")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warm", default="", help="k/n: only compile this share of the variants")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ops = {o.name: o for o in make_ops(SMOKE_SHAPES if args.smoke else SHAPES, dtype)}
    wanted = [ops[name] for name in args.ops.split(",") if name in ops and name in VARIANTS]
    if args.warm:
        warm(wanted, dtype, device, args.warm)
        return 0
    timing_kw = (
        dict(method="wall", reps=2, trials=1, warmup=1)
        if args.smoke
        else dict(method="auto", reps=args.reps, trials=3, warmup=3, calls_per_graph=10, l2_flush_mode="read")
    )
    meta = {
        "benchmark": "kernels_normbwd",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "command": " ".join(["python3"] + sys.argv), "dtype": str(dtype).replace("torch.", ""), "timing": timing_kw,
        "timing_protocol": "solkit.harness.timing.benchmark(method='auto', l2_flush_mode='read'): graph_events "
        "(per-call CUDA events inside a CUDA graph) for calls under 0.1 ms; L2 flushed by a read sweep before every "
        "call; two rotating input sets; the resolved method is in each row",
        "criteria": "max|grad-ref| <= 2*max|eager_bf16-ref| + 4e-3*max|ref| for dx, dw (db); ref = float64",
        "bytes": "bwd: read x, dy (ds), stats, params; write dx, dw (db). fwdbwd: the op's forward + backward bytes",
    }  # fmt: skip
    rec = Recorder(args.out, meta)
    bw = None
    if device.type == "cuda":
        bw, copy_info = measure_copy_bandwidth(device, timing_kw)
        rec.doc["bandwidth"] = {"copy_measured_Bps": bw, "copy_runs": copy_info, "datasheet_Bps": 4.8e12}
    for op in wanted:
        sweep_op(rec, op, dtype, device, timing_kw, bw, args.budget_s, args.modes.split(","))
    if device.type == "cuda":
        rec.doc["registers"] = kernel_registers()
        for r in rec.doc["registers"]:
            print(f"regs {r.get('kernel')} warps={r.get('num_warps')} regs={r.get('n_regs')} "
                  f"spills={r.get('n_spills')} {r.get('key', '')[-160:]} {r.get('error', '')}", flush=True)  # fmt: skip
    rec.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
