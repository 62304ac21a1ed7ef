"""Benchmark: SwiGLU, GeGLU, RoPE, cross-entropy and fused linear CE vs eager, torch.compile and Liger.

For each op x backend x {fwd, fwd+bwd}: a correctness check against an fp64 (fp32 for the large CE/FLCE
GEMM paths) reference on fresh random inputs with the allocator poisoned with NaN, the error compared
with eager PyTorch's same-dtype error (pass: err <= 2 x torch err + atol); then the timing through
solkit.harness.timing.benchmark with the harness's protocol (method "auto": per-call CUDA events captured
inside a CUDA graph for calls under 100 us, CUDA events with the launch hidden otherwise; the L2 flushed
by a read sweep before every call; rotating inputs); bytes, T_SOL and SOL
fraction against the copy bandwidth measured in the same run (2 GiB copy_) and the 4.8 TB/s datasheet
value. Fused linear CE also reports peak memory. Every failure becomes a row with its error.

    python3 lab/benchmarks/kernels_gates.py --out results.json [--ops swiglu,rope] [--small] [--budget-s 110]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import sys
import time
import traceback

import torch
from kernels_gates_ops import (  # noqa: F401  (re-exported: kernels_rope.py and kernels_record.py use them from here)
    LIGER_ERR,
    _gen,
    _randint,
    _randn,
    eager_rope,
    eager_rope_interleaved,
    hf_rotate_half,
    liger,
    liger_rope_bshd,
    make_ops,
)

from solkit.kernels.cross_entropy import fused_linear_cross_entropy
from solkit.kernels.cross_entropy.dispatch import CE_CONFIG, LAST_LAUNCH
from solkit.kernels.cross_entropy.fused_linear import DEFAULT_CHUNK_TOKENS
from solkit.kernels.gates.glu import GATE_CONFIG
from solkit.kernels.rope.rotary import ROPE_CONFIG
from solkit.sol.model import sol_fraction
from solkit.timing import benchmark

DATASHEET_BW = 4.8e12
SAVE = None  # set by main(): rewrites the JSON file
QUICK = False  # --small: few repetitions (CPU smoke test through the Triton interpreter)
ATOL = 1e-4
L2_FLUSH = "read"  # the harness protocol: a read sweep leaves the L2 clean (no write-back charged to the call)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out64).all():
        return math.inf
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def poison_allocator(nbytes: int, device: str) -> None:
    """Leave NaN in freed cache blocks so an output element the kernel never writes shows up as NaN."""
    n = max(nbytes // 4, 1)
    torch.empty(n, dtype=torch.float32, device=device).fill_(float("nan"))
    torch.cuda.synchronize() if device == "cuda" else None


# ------------------------------------------------------------------------------------- correctness
def _outputs(res):
    return list(res) if isinstance(res, (tuple, list)) else [res]


def run_once(fn, inputs, n_grad, backward: bool, grad_outs=None):
    """Run fn on clones of inputs (some backends work in place); returns (outputs, grads)."""
    xs = [t.clone() for t in inputs]
    if backward:
        for t in xs[:n_grad]:
            t.requires_grad_(True)
    if not backward:
        with torch.no_grad():  # the same grad mode as the timed forward (one torch.compile graph)
            return [o.detach() for o in _outputs(fn(*xs))], []
    outs = _outputs(fn(*xs))
    # clones: some backends (Liger RoPE) rotate the incoming gradient in place
    gos = [None if g is None else g.clone() for g in grad_outs] if grad_outs is not None else [None] * len(outs)
    grads = torch.autograd.grad(outs, xs[:n_grad], [g if o.dim() else None for o, g in zip(outs, gos)])
    return [o.detach() for o in outs], list(grads)


def reference(fn_eager, inputs, n_grad, backward, grad_outs, dtype64):
    ups = [t.to(dtype64) if t.is_floating_point() else t for t in inputs]
    gos = [None if g is None else g.to(dtype64) for g in grad_outs] if grad_outs else None
    return run_once(fn_eager, ups, n_grad, backward, gos)


def max_ratio_check(got, ref, torch_same):
    """Per-tensor errors; pass if every err <= 2 x torch's same-dtype err + ATOL."""
    errs = [rel_err(a, r) for a, r in zip(got, ref)]
    t_errs = [rel_err(a, r) for a, r in zip(torch_same, ref)]
    ok = all(e <= 2 * te + ATOL for e, te in zip(errs, t_errs))
    return ok, errs, t_errs


# ------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="kernels_gates.json")
    ap.add_argument("--ops", default="swiglu,geglu,rope,cross_entropy,fused_linear_ce,rope_interleaved")
    ap.add_argument("--backends", default="solkit,eager,compile,liger")
    ap.add_argument("--small", action="store_true", help="tiny shapes (CPU smoke test)")
    ap.add_argument("--budget-s", type=float, default=110.0, help="stop starting new work after this many s")
    ap.add_argument(
        "--sweep-budget-s",
        type=float,
        default=None,
        help="stop starting autotune candidates after this many s (default: --budget-s)",
    )
    ap.add_argument(
        "--ce-sweep",
        default="",
        help="CE candidates of the split kernel: "
        "split_block:warps:progs_per_sm:keep_exp:prefetch:maxnreg[:tagged[:skew[:max_spins[:block:warps:stages:"
        "progs_per_sm:warp_stats]]]],... (split_block 0: the two-sweep kernel, set by the last five fields), or "
        "key=value/key=value with CE_CONFIG keys",
    )
    ap.add_argument("--gate-sweep", default="", help="SwiGLU/GeGLU autotune candidates: block:warps,...")
    ap.add_argument("--rope-sweep", default="", help="RoPE autotune candidates: warps:max_tile[:tokens[:tile]],...")
    ap.add_argument("--probe-fwd", action="store_true", help="also time the forward of every autotune candidate")
    ap.add_argument("--flce-chunks", default="", help="extra fused linear CE chunk sizes, comma separated")
    ap.add_argument("--markdown", metavar="JSON", help="print a markdown summary of a results file and exit")
    args = ap.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            loaded = json.load(f)
        print(targets_summary(loaded) + "\n\n" + markdown_summary(loaded))
        return 0
    global QUICK
    QUICK = args.small
    t_start = time.time()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    doc = {
        "benchmark": "kernels_gates",
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": _triton_version(),
        "liger": _liger_version(),
        "command": " ".join(sys.argv),
        "dtype": "bfloat16",
        "timing": {
            "function": "solkit.harness.timing.benchmark",
            "method": "auto (graph_events for calls < 100 us, else events; events for host-syncing backends)",
            "l2_flush_mode": L2_FLUSH,
            "note": "per-row timing.method / l2_flush_mode record what ran; not comparable with rounds 1-2 "
            "(memset write flush + graph-subtract)",
        },
        "pass_rule": f"rel-L2 err <= 2 x eager same-dtype err + {ATOL}",
        "solkit_ce_config": dict(CE_CONFIG),
        "solkit_rope_config": dict(ROPE_CONFIG),
        "solkit_gate_config": dict(GATE_CONFIG),
        "solkit_flce_chunk_tokens": DEFAULT_CHUNK_TOKENS,
        "rows": [],
    }

    def save():
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, default=str)

    global SAVE
    SAVE = save  # rows are written as they come, so a job killed at its budget keeps them

    bw = measure_copy_bandwidth(dev)
    doc["copy_bandwidth_Bps"] = bw
    doc["datasheet_bandwidth_Bps"] = DATASHEET_BW
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    save()
    ops = make_ops(args.small)
    backends = args.backends.split(",")
    for op_name in args.ops.split(","):
        if op_name not in ops:
            doc["rows"].append({"op": op_name, "error": "unknown op"})
            continue
        run_op(doc, op_name, ops[op_name], backends, dev, bw, args, t_start)
        save()
        gc.collect()
        torch.cuda.empty_cache() if dev == "cuda" else None
    doc["wall_s"] = round(time.time() - t_start, 1)
    save()
    print_table(doc)
    return 0


def _triton_version():
    try:
        import triton

        return triton.__version__
    except Exception:  # noqa: BLE001
        return None


def _liger_version():
    try:
        from importlib.metadata import version

        return version("liger_kernel")
    except Exception:  # noqa: BLE001
        return None


def measure_copy_bandwidth(dev: str) -> float:
    n = (2 * 2**30) // 2 if dev == "cuda" else 2**20
    src = torch.randn(n, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = benchmark(dst.copy_, [(src,)], method="events" if dev == "cuda" else "auto", reps=20, trials=2)
    return 2 * src.numel() * src.element_size() / (t.median_ms * 1e-3)


def run_op(doc, op_name, op, backends, dev, bw, args, t_start):
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    # fwd+bwd first: the launch-config autotuning (if any) runs there and then serves both modes
    modes = ["fwd+bwd"] if op.get("fwdbwd_only") else ["fwd+bwd", "fwd"]
    compiled = {}
    for mode in modes:
        backward = mode == "fwd+bwd"
        dtype64 = torch.float64 if op_name not in ("fused_linear_ce",) else torch.float32
        try:
            base = op["inputs"](dev, dtype)
            outs_probe = _outputs(op["fns"]["eager"](*[t.clone() for t in base]))
            grad_outs = [_randn(o.shape, dev, o.dtype) if o.dim() else None for o in outs_probe] if backward else None
            del outs_probe
            ref_out, ref_grads = reference(op["fns"]["eager"], base, op["n_grad"], backward, grad_outs, dtype64)
            torch_out, torch_grads = run_once(op["fns"]["eager"], base, op["n_grad"], backward, grad_outs)
        except Exception as exc:  # noqa: BLE001
            doc["rows"].append({"op": op_name, "mode": mode, "error": f"reference failed: {exc!r}"[:300]})
            continue
        sweep = SWEEPS.get(op_name)
        if backward and sweep and getattr(args, sweep[0]) and "solkit" in backends:
            refs = (ref_out + ref_grads, torch_out + torch_grads)
            autotune(doc, op, op_name, base, grad_outs, sweep, getattr(args, sweep[0]), dev, bw, args, t_start, refs)
        for backend in backends:
            if backend != "compile" and backend not in op["fns"]:
                continue  # e.g. Liger has no interleaved RoPE
            if backend == "compile" and op.get("no_compile"):
                continue
            row = {"op": op_name, "shape": op["shape"], "mode": mode, "backend": backend}
            if time.time() - t_start > args.budget_s:
                row["error"] = "skipped: time budget"
                doc["rows"].append(row)
                continue
            try:
                fn = _backend_fn(op, op_name, backend, backward, compiled)
                if fn is None:
                    row["error"] = LIGER_ERR if backend == "liger" and LIGER_ERR else "not available for this op"
                    doc["rows"].append(row)
                    continue
                t0 = time.time()
                poison_allocator(sum(t.numel() * t.element_size() for t in base), dev)
                got_out, got_grads = run_once(fn, base, op["n_grad"], backward, grad_outs)
                ok, errs, t_errs = max_ratio_check(got_out + got_grads, ref_out + ref_grads, torch_out + torch_grads)
                row.update(correct=ok, rel_err=errs, torch_rel_err=t_errs, first_call_s=round(time.time() - t0, 2))
                if op_name == "cross_entropy" and backend == "solkit":
                    row["launch"] = dict(LAST_LAUNCH)
                del got_out, got_grads
                # Liger's cross-entropy syncs with the host (.item()): no graph capture attempt, since an
                # aborted capture leaves the CUDA RNG in capture state for the rest of the process.
                syncs = backend == "liger" and op_name in ("cross_entropy", "fused_linear_ce")
                _time_row(row, op, op_name, fn, base, backward, grad_outs, dev, bw, "events" if syncs else "auto")
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                row["traceback"] = traceback.format_exc()[-1500:]
            doc["rows"].append(row)
            print(_row_line(row), flush=True)
        if op_name == "fused_linear_ce" and args.flce_chunks:
            _flce_chunks(doc, op, base, dev, args, t_start)
        del base, ref_out, ref_grads, torch_out, torch_grads


def _backend_fn(op, op_name, backend, backward, compiled):
    if backend == "compile":
        if op.get("no_compile"):
            return None
        key = op_name
        if key not in compiled:
            compiled[key] = torch.compile(op["fns"]["eager"])  # one object per op (grad mode recompiles)
        return compiled[key]
    return op["fns"].get(backend)


def _time_row(row, op, op_name, fn, base, backward, grad_outs, dev, bw, method="auto", reps=(30, 2)):
    n_grad = op["n_grad"]
    # Private output gradients: a backward may modify them in place (Liger's RoPE rotates them), and the
    # shared ones are what later rows' correctness checks compare against the reference with.
    grad_outs = [None if g is None else g.clone() for g in grad_outs] if grad_outs is not None else None
    is_flce = op_name == "fused_linear_ce"
    pool = []
    for _ in range(1 if is_flce else 2):
        xs = [t.clone() for t in base]
        if backward:
            for t in xs[:n_grad]:
                t.requires_grad_(True)
        pool.append(tuple(xs))

    if backward:

        def call(*xs):
            outs = _outputs(fn(*xs))
            return torch.autograd.grad(outs, xs[:n_grad], [g if o.dim() else None for o, g in zip(outs, grad_outs)])
    else:

        def call(*xs):
            with torch.no_grad():
                return fn(*xs)

    if is_flce:
        torch.cuda.synchronize() if dev == "cuda" else None
        torch.cuda.reset_peak_memory_stats() if dev == "cuda" else None
        before = torch.cuda.memory_allocated() if dev == "cuda" else 0
        call(*pool[0])
        if dev == "cuda":
            torch.cuda.synchronize()
            inputs_bytes = sum(t.numel() * t.element_size() for t in pool[0])
            row["peak_extra_mem_bytes"] = torch.cuda.max_memory_allocated() - before
            row["peak_mem_bytes"] = row["peak_extra_mem_bytes"] + inputs_bytes  # inputs + everything the call adds
        res = benchmark(call, pool, method="events", reps=2 if QUICK else 5, trials=2, warmup=1, l2_flush_mode=L2_FLUSH)
    else:
        reps, trials = (2, 1) if QUICK else reps
        res = benchmark(call, pool, method=method, reps=reps, trials=trials, warmup=1 if QUICK else 3,
                        calls_per_graph=10, l2_flush_mode=L2_FLUSH)  # fmt: skip
    keys = ("median_ms", "q1_ms", "q3_ms", "cv", "method", "reps", "trials", "host_ms", "l2_flush_mode")
    row["timing"] = {k: res.to_dict().get(k) for k in keys}
    t_s = res.median_ms * 1e-3
    row["median_ms"] = res.median_ms
    if "flops" in op:
        row["flops"] = op["flops"]
        row["tflops_per_s"] = op["flops"] / t_s / 1e12
        return
    nbytes = op["bytes_fwdbwd"] if backward else op["bytes_fwd"]
    row["bytes"] = nbytes
    row["achieved_Bps"] = nbytes / t_s
    for basis, b in (("calibrated", bw), ("datasheet", DATASHEET_BW)):
        score = sol_fraction(nbytes / b, t_s)
        row[f"t_sol_ms_{basis}"] = nbytes / b * 1e3
        row[f"sol_{basis}"] = score.sol_fraction
        row[f"sol_raw_{basis}"] = score.raw_fraction
        if score.violation:
            row[f"violation_{basis}"] = "measured time below T_SOL: timing or byte count bug"


#: op -> (argparse attribute with "a:b:c,..." candidates, the module's config dict, its keys in order)
SWEEPS = {
    "cross_entropy": (
        "ce_sweep",
        CE_CONFIG,
        (
            "split_block",
            "split_warps",
            "split_programs_per_sm",
            "split_keep_exp",
            "split_prefetch",
            "split_maxnreg",
            "split_tagged",
            "split_skew",
            "split_max_spins",
            "block",
            "num_warps",
            "num_stages",
            "programs_per_sm",
            "warp_stats",
        ),
    ),
    "swiglu": ("gate_sweep", GATE_CONFIG, ("block", "num_warps")),
    "rope": ("rope_sweep", ROPE_CONFIG, ("num_warps", "max_tile", "tokens", "tile")),
}


def _spec_config(spec: str, keys) -> dict:
    """A candidate: positional ``a:b:c`` over ``keys`` (omitted trailing keys: the default), or named
    ``key=value/key=value`` (e.g. ``split_skew=4/split_unroll=2``)."""
    if "=" in spec:
        return {k: int(v) for k, v in (kv.split("=") for kv in spec.split("/"))}
    return dict(zip(keys, (int(v) for v in spec.split(":"))))


def autotune(doc, op, op_name, base, grad_outs, sweep, spec_list, dev, bw, args, t_start, refs):
    """Check and time the solkit fwd+bwd under each candidate launch config (the module default included),
    then keep the fastest correct one in the module's config dict for the rest of the run."""
    _, config, keys = sweep
    default = dict(config)
    specs = [":".join(str(default[k]) for k in keys)]
    specs += [sp for sp in spec_list.split(",") if sp and sp not in specs]
    results = []
    sweep_budget = args.budget_s if args.sweep_budget_s is None else min(args.sweep_budget_s, args.budget_s)
    for spec in specs:
        if time.time() - t_start > sweep_budget:
            break
        cfg = {**default, **_spec_config(spec, keys)}
        config.update(cfg)
        row = {"op": op_name, "mode": "fwd+bwd", "backend": f"solkit[{spec}]", "config": cfg, "autotune": True}
        try:
            fn = op["fns"]["solkit"]
            poison_allocator(sum(t.numel() * t.element_size() for t in base), dev)
            got_out, got_grads = run_once(fn, base, op["n_grad"], True, grad_outs)
            ok, errs, _ = max_ratio_check(got_out + got_grads, refs[0], refs[1])
            row.update(correct=ok, rel_err=errs)
            if op_name == "cross_entropy":
                row["launch"] = dict(LAST_LAUNCH)  # which kernel ran, its grid, registers, spills
            del got_out, got_grads
            _time_row(row, op, op_name, fn, base, True, grad_outs, dev, bw, reps=(20, 2))
            if ok:
                results.append((row["median_ms"], cfg))
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        doc["rows"].append(row)
        print(_row_line(row), flush=True)
        if args.probe_fwd and "error" not in row:  # the forward alone too: separates read rate from L2 reuse
            frow = {**{k: row[k] for k in ("op", "backend", "config", "autotune")}, "mode": "fwd"}
            try:
                got_out, _ = run_once(fn, base, op["n_grad"], False)
                n = len(got_out)
                ok, errs, _ = max_ratio_check(got_out, refs[0][:n], refs[1][:n])
                frow.update(correct=ok, rel_err=errs)
                _time_row(frow, op, op_name, fn, base, False, None, dev, bw, reps=(10, 1))
            except Exception as exc:  # noqa: BLE001
                frow["error"] = f"{type(exc).__name__}: {exc}"[:400]
            doc["rows"].append(frow)
            print(_row_line(frow), flush=True)
    best = min(results, key=lambda r: r[0])[1] if results else default
    config.clear()
    config.update({**default, **best})
    doc.setdefault("autotuned", {})[op_name] = {"default": default, "chosen": dict(config)}
    print(f"autotune {op_name}: chose {dict(config)}", flush=True)


def _flce_chunks(doc, op, base, dev, args, t_start):
    for chunk in (int(c) for c in args.flce_chunks.split(",")):
        if time.time() - t_start > args.budget_s:
            break
        row = {"op": "fused_linear_ce", "mode": "fwd+bwd", "backend": f"solkit[chunk={chunk}]"}
        try:
            fn = lambda h, w, y, c=chunk: fused_linear_cross_entropy(h, w, y, chunk_tokens=c)  # noqa: E731
            _time_row(row, op, "fused_linear_ce", fn, base, True, [None], dev, 0.0)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        doc["rows"].append(row)
        print(_row_line(row), flush=True)


T0 = time.time()


def _row_line(row) -> str:
    row.setdefault("t_run_s", round(time.time() - T0, 1))
    if SAVE is not None:
        SAVE()
    if "error" in row and "median_ms" not in row:
        head = f"[{row['t_run_s']:6.1f}s] {row['op']:<17} {row.get('mode', ''):<8} {row.get('backend', ''):<22}"
        return f"{head} ERROR {row['error'][:90]}"
    extra = f"sol {row['sol_calibrated']:.3f}" if "sol_calibrated" in row else ""
    if "tflops_per_s" in row:
        extra = f"{row['tflops_per_s']:.0f} TFLOP/s peak {row.get('peak_mem_bytes', 0) / 2**30:.2f} GiB"
    ok = row.get("correct")
    return (
        f"[{row['t_run_s']:6.1f}s] {row['op']:<17} {row['mode']:<8} {row['backend']:<22} "
        f"{row['median_ms']:9.4f} ms  {extra:<32}"
        f" {'ok' if ok else ('FAIL' if ok is False else '')}"
    )


def print_table(doc) -> None:
    print(f"\n{doc['device']}  copy bw {doc['copy_bandwidth_Bps'] / 1e12:.3f} TB/s  torch {doc['torch']}")
    for row in doc["rows"]:
        if "op" in row and "mode" in row and "backend" in row:
            print(_row_line(row))


TARGETS = [  # (op, mode, minimum SOL fraction on the calibrated basis) from issue 7
    ("swiglu", "fwd", 0.92), ("geglu", "fwd", 0.92), ("rope", "fwd", 0.92),
    ("swiglu", "fwd+bwd", 0.80), ("rope", "fwd+bwd", 0.80), ("cross_entropy", "fwd+bwd", 0.80),
]  # fmt: skip


def targets_summary(doc) -> str:
    """Markdown table: each issue-7 target, the measured value and whether it is met."""
    rows = {(r["op"], r.get("mode"), r.get("backend")): r for r in doc["rows"] if "backend" in r}
    out = ["| target | measured | met |", "|---|---|---|"]
    for op, mode, need in TARGETS:
        r = rows.get((op, mode, "solkit"))
        if r is None or "sol_raw_calibrated" not in r:
            out.append(f"| {op} {mode} SOL >= {need} | not measured | - |")
            continue
        val = r["sol_raw_calibrated"]
        met = "yes" if val >= need and r.get("correct") else "no"
        out.append(f"| {op} {mode} SOL >= {need} (calibrated) | {val:.3f} ({r['median_ms']:.4f} ms) | {met} |")
    flce = {b: rows.get(("fused_linear_ce", "fwd+bwd", b)) for b in ("solkit", "eager")}
    if all(r and "median_ms" in r and "peak_mem_bytes" in r for r in flce.values()):
        ratio = flce["solkit"]["peak_mem_bytes"] / flce["eager"]["peak_mem_bytes"]
        out.append(
            f"| fused linear CE peak memory <= 1/3 of matmul + CE | {ratio:.3f} | {'yes' if ratio <= 1 / 3 else 'no'} |"
        )
        speed = flce["eager"]["median_ms"] / flce["solkit"]["median_ms"]
        out.append(
            f"| fused linear CE at least as fast as matmul + CE | {speed:.2f}x | {'yes' if speed >= 1 else 'no'} |"
        )
    for (op, mode, backend), r in sorted(rows.items()):
        if backend != "solkit" or "median_ms" not in r:
            continue
        rivals = [rows.get((op, mode, b)) for b in ("compile", "liger")]
        times = [x["median_ms"] for x in rivals if x and "median_ms" in x and x.get("correct", True)]
        if not times:
            continue
        best = min(times)
        met = "yes" if r["median_ms"] <= best else "no"
        out.append(f"| {op} {mode} at least as fast as min(compile, liger) | {best / r['median_ms']:.2f}x | {met} |")
    return "\n".join(out)


def markdown_summary(doc) -> str:
    """One markdown table per results file: time, SOL fraction (both bases) and correctness per row."""
    bw = doc["copy_bandwidth_Bps"]
    lines = [
        f"{doc['device']}, {doc['date_utc']}, torch {doc['torch']}, triton {doc['triton']}, liger {doc.get('liger')}; "
        f"copy bandwidth measured {bw / 1e12:.2f} TB/s (calibrated basis), datasheet {DATASHEET_BW / 1e12:.1f} TB/s.",
        "",
        "| op | mode | backend | median ms | SOL (calibrated) | SOL (datasheet) | TFLOP/s | peak GiB | correct "
        "| method |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        if "backend" not in r:
            continue
        if "median_ms" not in r:
            err = r.get("error", "")[:80].replace("|", "/")
            lines.append(f"| {r['op']} | {r.get('mode', '')} | {r['backend']} | error: {err} |||||||")
            continue
        sol_c = f"{r['sol_raw_calibrated']:.3f}" if "sol_raw_calibrated" in r else ""
        sol_d = f"{r['sol_raw_datasheet']:.3f}" if "sol_raw_datasheet" in r else ""
        tf = f"{r['tflops_per_s']:.0f}" if "tflops_per_s" in r else ""
        mem = f"{r['peak_mem_bytes'] / 2**30:.2f}" if "peak_mem_bytes" in r else ""
        ok = {True: "yes", False: "NO"}.get(r.get("correct"), "")
        lines.append(
            f"| {r['op']} | {r['mode']} | {r['backend']} | {r['median_ms']:.4f} | {sol_c} | {sol_d} | {tf} | {mem} "
            f"| {ok} | {r['timing']['method']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
