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

    python3 lab/benchmarks/kernels_norm.py --out results.json [--sweep] [--no-compile] [--budget-s 100]
    python3 lab/benchmarks/kernels_norm.py --smoke   # CPU, Triton interpreter, tiny shapes: logic check only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from kernels_norm_common import (  # noqa: E402
    DATASHEET_BW,
    SHAPES,
    Recorder,
    _liger,
    bench_row,
    elapsed,
    make_inputs,
    make_ops,
    measure_copy_bandwidth,
    pool_for,
    run_mode,
    same_bytes_stream_rows,
    sol_cols,
    timed_fn,
)
from kernels_norm_sweep import (  # noqa: E402
    AB_VARIANTS,
    SWEEP,
    ab_compare,
    adopt_norm_fwd,
    adopt_wide_softmax,
    partial_sum_sweep,
    sweep,
)

from solkit.timing import benchmark  # noqa: E402


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
    p.add_argument("--adopt-norm-fwd", action="store_true",
                   help="table rows use the sweep's fastest RMSNorm forward (one-block or looped)")  # fmt: skip
    p.add_argument("--ab", default="", help="comma list of ops for forward A/B runs against Liger (AB_VARIANTS)")
    p.add_argument("--ab-rounds", type=int, default=8, help="alternating turns per candidate in --ab")
    p.add_argument("--ab-compile", action="store_true", help="torch.compile of the eager code joins the --ab runs")
    p.add_argument("--no-stream", action="store_true", help="skip the same-bytes elementwise copy rows")
    p.add_argument("--precompile", action="store_true",
                   help="only torch.compile the --ops (fwd, fwd+bwd) to fill Inductor's disk caches")  # fmt: skip
    args = p.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.smoke:
        shapes = {"norm": {"": (8, 96), "_70b": (4, 300)}, "softmax": {"": (8, 96), "_vocab": (2, 20000)}}
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
    if args.precompile:  # a warm-up process: later runs of the compile rows hit Inductor's caches
        ops = [o for o in make_ops(shapes, dtype) if not args.ops or o.name in args.ops.split(",")]
        precompile(ops, dtype, device)
        return 0
    rec = Recorder(args.out, meta)

    bw = None
    if device.type == "cuda":
        bw, copy_info = measure_copy_bandwidth(device, timing_kw)
        note = "calibrated basis = 1 GiB bf16 copy_ (as solkit calibrate), CUDA events, read+write counted"
        rec.doc["bandwidth"] = {"copy_measured_Bps": bw, "copy_runs": copy_info, "datasheet_Bps": DATASHEET_BW,
                                "copy_bytes": 2 * 2**30, "note": note}  # fmt: skip
        print(f"copy bandwidth {bw / 1e12:.3f} TB/s (events)", flush=True)
        try:
            if not args.no_stream:
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
        keyed = [k for k in SWEEP if k.endswith(("_check", "_fwd_looped", "_fwd_prefetch"))]  # suffixed sets too
        names = [o.name for o in ops] + ["partial_sum"] + keyed if args.smoke else args.sweep_ops.split(",")
        for name in names:  # in the order given, the most informative first
            if name == "partial_sum":
                partial_sum_sweep(rec, dtype, device, timing_kw, bw, args)
            elif name in by_name:
                sweep(rec, [by_name[name]], dtype, device, timing_kw, bw, args)
            else:  # a SWEEP key naming an op and a variant set: <op>_fwd_extra, <op>_check, <op>_fwd_looped
                for suffix in ("_fwd_extra", "_check", "_fwd_looped", "_fwd_prefetch"):
                    if name.endswith(suffix) and name.removesuffix(suffix) in by_name:
                        sweep(rec, [by_name[name.removesuffix(suffix)]], dtype, device, timing_kw, bw, args, key=name)
    if args.adopt_wide_softmax:
        adopt_wide_softmax(rec)
    if args.adopt_norm_fwd:
        adopt_norm_fwd(rec)
    if args.ab or args.smoke:
        ab_ops = [o for o in ops if args.smoke or o.name in args.ab.split(",")]
        ab_compare(rec, ab_ops, AB_VARIANTS, liger, dtype, device,
                   timing_kw, bw, 2 if args.smoke else args.ab_rounds, with_compile=args.ab_compile)  # fmt: skip
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


def precompile(ops, dtype, device) -> None:
    """torch.compile each op's eager baseline and run it once per mode (the same grad modes and shapes as
    the compile rows), so that Dynamo's graphs are compiled into Inductor's on-disk caches."""
    torch._dynamo.config.cache_size_limit = 64
    for op in ops:
        fn = torch.compile(op.impls["torch"], dynamic=False)
        for mode in ("fwd", "fwdbwd"):
            t0 = time.perf_counter()
            run_mode(fn, *make_inputs(op, dtype, device, op.seed), mode)
            print(f"[{elapsed():6.1f}s] precompiled {op.name} {mode} in {time.perf_counter() - t0:.1f}s", flush=True)


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
