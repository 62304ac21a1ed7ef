# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""Norm forwards at Llama-3-70B width (8192 x 8192 bf16) against torch.compile and Liger: round 5 sweeps.

torch.compile's RMSNorm forward beat solkit's at 8192 x 8192 in every earlier A/B round (64.1 against
68.0 us). This job (1) compiles the eager HF RMSNorm with torch.compile in a warm-up process whose
Inductor output code and autotuning choice are kept (``--warm-compile``; run with
``TORCH_LOGS=output_code``), (2) times solkit's forward launchers alone over launch shapes (rows per
program, warps, one-block against two-pass looped kernels with the whole row or chunks per pass, Triton
pipelining stages, cache hints), each checked first against a float64 reference, and (3) runs forward
A/B rounds (alternating turns, order rotated) of the fastest variants against Liger and torch.compile.

Timing: ``solkit.harness.timing.benchmark(method="auto", l2_flush_mode="read")`` (per-call CUDA events
inside a CUDA graph for calls under 0.1 ms), two rotating input sets. Check: max error at most twice
eager PyTorch's own bf16 error (against the same float64 reference) plus ``4e-3 x max|ref|``.

    python3 kernels_norm_r5.py --warm 0/3          # compile a third of the variants' Triton kernels
    TORCH_LOGS=output_code python3 kernels_norm_r5.py --warm-compile
    python3 kernels_norm_r5.py --out r5.json --budget-s 40 [--ops rmsnorm_70b,layernorm_70b]
    python3 kernels_norm_r5.py --smoke             # CPU interpreter, tiny shapes: logic check only
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from kernels_norm_common import (  # noqa: E402
    EPS,
    HARNESS_PROTOCOL,
    SHAPES,
    Recorder,
    _liger,
    as_tuple,
    elapsed,
    make_inputs,
    make_ops,
    poison_free_memory,
    record_bandwidth,
    run_meta,
    sol_cols,
    timing_options,
)

from solkit.kernels.norms.layer_norm import layernorm_forward  # noqa: E402
from solkit.kernels.norms.rms_norm import rmsnorm_forward  # noqa: E402
from solkit.timing import benchmark  # noqa: E402


def _looped(chunk: int, warps: int, **kw) -> dict:
    return dict(chunk=chunk, num_warps=warps, **kw)


#: Launcher keyword arguments per op, the committed default (``{}``) first. ``chunk`` 8192 at 8192 wide =
#: the whole row as one straight-line piece (``ONE_CHUNK``: loaded in pass 1, only the fp32 accumulator kept,
#: re-read in pass 2); ``chunk`` 0 = the one-block kernel (the row kept in registers through the reduction).
#: Round 5a (benchmarks/results/norms/2026-11-30_h200_fwd_1006.json, commit 82005ab) swept the looped kernel before ``ONE_CHUNK``: 8192 x 16
#: warps 79.2 us, 2048 x 8 67.7, one-block 68.5, torch.compile 63.3. Round 5b: the one-piece kernels.
VARIANTS = {
    "rmsnorm_70b": [{}, _looped(8192, 32), _looped(8192, 8), _looped(8192, 16, hints=0), _looped(8192, 16, hints=2)],
    "layernorm_70b": [{}, _looped(8192, 32), _looped(8192, 8)],
    "add_rmsnorm_70b": [{}, _looped(8192, 32, looped_prefetch=False), _looped(8192, 16, hints=0)],
    # 8B (4096 wide): the one-piece kernel against the one-block default (2 rows x 8 warps; with the residual
    # the looped 2048 x 8 warps with prefetch)
    "rmsnorm": [{}, _looped(4096, 8), _looped(4096, 16)],
    "add_rmsnorm": [{}, _looped(4096, 16, looped_prefetch=False), _looped(4096, 8, looped_prefetch=False)],
}
#: Round 5c (the final check): no sweep; A/B of the adopted defaults (one-piece forwards with the packed bf16
#: product; 8 warps for LayerNorm, 32 for add+RMSNorm at 8192; one-piece 4096 x 8 warps for RMSNorm at 4096)
#: against the alternatives below, Liger and (``--compile-ops``) torch.compile.
FINAL_ALTERNATIVES = {
    "rmsnorm_70b": [_looped(8192, 8)],
    "rmsnorm": [dict(chunk=0)],
    "add_rmsnorm_70b": [_looped(8192, 16, looped_prefetch=False)],
}
#: A/B candidates besides the default and the sweep's fastest: the previous defaults (round 4).
PREVIOUS = {
    "rmsnorm_70b": [_looped(2048, 8)],
    "layernorm_70b": [dict(chunk=0)],
    "add_rmsnorm_70b": [_looped(4096, 16, looped_prefetch=True)],
    "rmsnorm": [],
    "add_rmsnorm": [],
}


def launcher(op, params, cfg):
    """``f(x, residual) -> outputs in the reference's order`` for one solkit forward configuration."""
    if op.kind == "layernorm":
        return lambda x, r: layernorm_forward(x, *params, EPS, save_stats=False, **cfg)[:1]
    w = params[0]
    if op.kind == "add_rmsnorm":
        return lambda x, r: rmsnorm_forward(x, w, EPS, residual=r, save_rstd=False, **cfg)[1::-1]  # (s, y)
    return lambda x, r: rmsnorm_forward(x, w, EPS, save_rstd=False, **cfg)[:1]


def references(op, acts, params):
    """Float64 outputs and eager PyTorch's bf16 outputs (the error budget) on the same inputs."""
    if op.kind == "layernorm":
        ref = (F.layer_norm(acts[0].double(), (op.shape[1],), *[p.double() for p in params], EPS),)
        eager = (F.layer_norm(acts[0], (op.shape[1],), *params, EPS),)
        return ref, eager
    ref = as_tuple(op.reference(*[t.double() for t in acts], params[0].double()))
    return ref, as_tuple(op.reference(*acts, params[0]))


def check(outs, ref, eager) -> dict:
    errs = [float((o.double() - r).abs().max()) for o, r in zip(outs, ref)]
    budget = [2 * float((e.double() - r).abs().max()) + 4e-3 * float(r.abs().max()) for e, r in zip(eager, ref)]
    finite = all(bool(torch.isfinite(o).all()) for o in outs)
    return {"ok": finite and all(e <= b for e, b in zip(errs, budget)), "max_abs_err": errs, "err_budget": budget}


def sweep_op(rec, op, dtype, device, timing_kw, bw, budget_s) -> None:
    """Each variant: compile (cached by the warm-up processes), check against float64, time alone."""
    acts, params, _ = make_inputs(op, dtype, device, 7)
    ref, eager = references(op, acts, params)
    res = acts[1] if op.kind == "add_rmsnorm" else None
    pool = []
    for k in range(2):
        a = make_inputs(op, dtype, device, 50 + k)[0]
        pool.append((a[0], a[1] if len(a) > 1 else None))
    for cfg in VARIANTS[op.name]:
        if elapsed() > budget_s:
            rec.add("sweep", {"op": op.name, "config": cfg, "error": "skipped: time budget"})
            continue
        row = {"op": op.name, "shape": list(op.shape), "kernel": "fwd", "config": cfg, "bytes": op.bytes_fwd}
        try:
            fn = launcher(op, params, cfg)
            with torch.no_grad():
                fn(acts[0], res)  # compile or load from the cache
                poison_free_memory(4 * op.bytes_fwd, device)
                row.update(check(fn(acts[0], res), ref, eager))
                if row["ok"]:
                    r = benchmark(fn, pool, **timing_kw)
                    row.update({"median_ms": r.median_ms, "q1_ms": r.q1_ms, "q3_ms": r.q3_ms, "cv": r.cv,
                                "method": r.method})  # fmt: skip
                    if device.type == "cuda":
                        row.update(sol_cols(op.bytes_fwd, r.median_ms, bw))
        except Exception as exc:  # noqa: BLE001 - a failing variant is a row, never a crash
            row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        rec.add("sweep", row)
        us = row.get("median_ms", float("nan")) * 1e3
        print(f"[{elapsed():6.1f}s] {op.name:16s} {cfg} ok={row.get('ok')} us={us:.2f} "
              f"sol={row.get('sol_calibrated', float('nan')):.3f} {row.get('error', '')[:99]}",
              flush=True)  # fmt: skip


def rival_fn(op, params, impl):
    """Liger's or torch.compile's forward as ``f(x, residual)``, outputs in the reference's order."""
    if op.kind == "add_rmsnorm":
        return lambda x, r: as_tuple(impl(x, r, *params))
    return lambda x, r: as_tuple(impl(x, *params))


def ab_rounds(rec, op, cands: dict, dtype, device, timing_kw, bw, rounds: int) -> None:
    """Forward A/B: candidates timed in alternating turns (one trial of the protocol each, order rotated
    every round), each checked against float64 first. Per candidate: the median of its turn medians, their
    range, and per-round ratios to Liger and torch.compile (min / median / max)."""
    acts, params, _ = make_inputs(op, dtype, device, 11)
    ref, eager = references(op, acts, params)
    res = acts[1] if op.kind == "add_rmsnorm" else None
    pool = []
    for k in range(2):
        a = make_inputs(op, dtype, device, 50 + k)[0]
        pool.append((a[0], a[1] if len(a) > 1 else None))
    ok, names = {}, []
    with torch.no_grad():
        for name, fn in cands.items():
            try:
                poison_free_memory(4 * op.bytes_fwd, device)
                ok[name] = check(as_tuple(fn(acts[0], res)), ref, eager)
                names.append(name)
            except Exception as exc:  # noqa: BLE001
                rec.add(
                    "ab", {"op": op.name, "config": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
                )
        turns = {name: [] for name in names}
        for k in range(rounds):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                r = benchmark(cands[name], pool, **{**timing_kw, "trials": 1})
                turns[name].append(r.median_ms)
    for name, ms in turns.items():
        srt = sorted(ms)
        row = {"op": op.name, "shape": list(op.shape), "config": name, **ok[name], "bytes": op.bytes_fwd,
               "median_ms": srt[len(srt) // 2], "min_ms": srt[0], "max_ms": srt[-1], "turn_ms": ms, "rounds": rounds,
               "method": r.method}  # fmt: skip
        for rival in ("liger", "compile"):
            if rival in turns and rival != name:
                ratios = sorted(a / b for a, b in zip(ms, turns[rival]))
                row[f"ratio_to_{rival}"] = {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]}
        if device.type == "cuda":
            row.update(sol_cols(op.bytes_fwd, row["median_ms"], bw))
        rec.add("ab", row)
        rel = " ".join(f"vs {k[9:]} {v['min']:.3f}/{v['median']:.3f}/{v['max']:.3f}" for k, v in row.items()
                       if k.startswith("ratio_to_"))  # fmt: skip
        print(f"[{elapsed():6.1f}s] ab {op.name} {name} ok={row['ok']} us={row['median_ms'] * 1e3:.2f} "
              f"[{srt[0] * 1e3:.2f}, {srt[-1] * 1e3:.2f}] sol={row.get('sol_calibrated', float('nan')):.3f} {rel}",
              flush=True)  # fmt: skip


def fastest(rec, op_name, n) -> list[dict]:
    rows = [r for r in rec.doc["sweep"] if r.get("op") == op_name and r.get("ok") and "median_ms" in r]
    return [r["config"] for r in sorted(rows, key=lambda r: r["median_ms"])[:n]]


def kernel_registers() -> list[dict]:
    """Registers and spills (ptxas, read when the binary is loaded) of every forward kernel this process
    compiled, with its specialisation key; best effort (Triton's cache layout differs between versions)."""
    from solkit.kernels.norms import layer_norm as ln
    from solkit.kernels.norms import rms_norm as rn

    out = []
    for jit_fn in (rn._rmsnorm_fwd_kernel, rn._rmsnorm_fwd_looped_kernel, ln._layernorm_fwd_kernel,
                   ln._layernorm_fwd_looped_kernel):  # fmt: skip
        try:
            for entry in getattr(jit_fn, "device_caches", {}).values():
                for key, k in entry[0].items():
                    k._init_handles()
                    out.append({"kernel": k.name, "n_regs": k.n_regs, "n_spills": k.n_spills,
                                "num_warps": k.metadata.num_warps, "num_stages": k.metadata.num_stages,
                                "key": str(key)[-400:]})  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            out.append({"kernel": getattr(jit_fn, "__name__", "?"), "error": f"{type(exc).__name__}: {exc}"[:200]})
    return out


def warm(ops, dtype, device, part: str) -> None:
    """Compile this process's share (``k/n``) of the variants' Triton kernels (and Liger's, share 0) into
    the on-disk cache, so the timing process does not spend its budget compiling."""
    k, n = map(int, part.split("/"))
    jobs = [(op, cfg) for op in ops for cfg in VARIANTS.get(op.name, [{}]) + PREVIOUS.get(op.name, [])]
    data = {op.name: make_inputs(op, dtype, device, 7) for op in ops}
    with torch.no_grad():
        for i, (op, cfg) in enumerate(jobs):
            if i % n == k:
                acts, params, _ = data[op.name]
                try:
                    launcher(op, params, cfg)(acts[0], acts[1] if len(acts) > 1 else None)
                except Exception as exc:  # noqa: BLE001
                    print(f"warm {op.name} {cfg}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        if k == 0:
            try:
                liger = _liger()
                for op in ops:
                    acts, params, _ = data[op.name]
                    liger[op.kind](*acts, *params)
            except Exception as exc:  # noqa: BLE001 - Liger missing: the timing process reports it
                print(f"warm liger: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"[{elapsed():6.1f}s] warm {part} done ({len(jobs[k::n])} kernels)", flush=True)


def warm_compile(ops, dtype, device) -> None:
    """torch.compile of the eager baselines of the ``ops`` (forward, no grad), as the A/B rounds compile
    them: Inductor's code (``TORCH_LOGS=output_code``) and autotuning choice land in its cache dir."""
    for op in ops:
        fn = torch.compile(op.impls["torch"], dynamic=False)
        acts, params, _ = make_inputs(op, dtype, device, 11)
        with torch.no_grad():
            fn(*acts, *params)
            fn(*acts, *params)
        print(f"[{elapsed():6.1f}s] compiled {op.name}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--budget-s", type=float, default=40.0, help="start no new variant after this many seconds")
    p.add_argument("--ops", default="rmsnorm_70b,layernorm_70b,rmsnorm,add_rmsnorm_70b,add_rmsnorm",
                   help="in order: sweep (ops in VARIANTS), then A/B rounds")  # fmt: skip
    p.add_argument("--ab", default="rmsnorm_70b,layernorm_70b,rmsnorm,add_rmsnorm_70b,add_rmsnorm",
                   help="ops for A/B rounds against Liger and torch.compile")  # fmt: skip
    p.add_argument("--ab-top", type=int, default=1, help="fastest sweep variants joining the default in A/B")
    p.add_argument("--final", action="store_true", help="round 5c: no sweep, FINAL_ALTERNATIVES in the A/B")
    p.add_argument("--compile-ops", default="", help="ops whose A/B includes torch.compile (default: all)")
    p.add_argument("--ab-rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warm", default="", help="k/n: only compile this share of the variants")
    p.add_argument("--warm-compile", action="store_true", help="only torch.compile the --ab ops")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.final:  # the sweep sets off, the final alternatives as the A/B's extra candidates
        VARIANTS.clear()
        PREVIOUS.clear()
        PREVIOUS.update(FINAL_ALTERNATIVES)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shapes = {"norm": {"": (8, 96), "_70b": (4, 300)}, "softmax": {}} if args.smoke else SHAPES
    ops = {o.name: o for o in make_ops(shapes, dtype)}
    wanted = [ops[name] for name in args.ops.split(",") if name in ops]
    if args.warm:
        warm(wanted, dtype, device, args.warm)
        return 0
    if args.warm_compile:
        warm_compile([ops[name] for name in args.ab.split(",") if name in ops], dtype, device)
        return 0
    timing_kw = timing_options(args.smoke, args.reps)
    meta = run_meta(
        "kernels_norm_r5", device, dtype, timing_kw,
        timing_protocol=HARNESS_PROTOCOL + ". A/B: one trial per turn, order rotated.",
        criteria="sweep: max|out-ref| <= 2*max|eager_bf16-ref| + 4e-3*max|ref|, ref = float64; A/B rows: "
        "max|out-ref| <= max|ref|/64 (ref fp32)",
    )  # fmt: skip
    try:
        from importlib.metadata import version

        liger = _liger()
        meta["liger"] = version("liger_kernel")
    except Exception as exc:  # noqa: BLE001
        liger = {}
        meta["liger"] = f"unavailable: {type(exc).__name__}: {exc}"
    rec = Recorder(args.out, meta)
    bw = record_bandwidth(rec, device, timing_kw)
    rec.doc["ab"] = []
    for op in wanted:
        if op.name in VARIANTS:
            sweep_op(rec, op, dtype, device, timing_kw, bw, args.budget_s)
        if op.name in args.ab.split(",") and elapsed() < args.budget_s:
            configs = [{}] + PREVIOUS.get(op.name, [])
            configs += [c for c in fastest(rec, op.name, args.ab_top) if c not in configs]
            acts, params, _ = make_inputs(op, dtype, device, 11)
            cands = {f"solkit{json.dumps(c, sort_keys=True)}": launcher(op, params, c) for c in configs}
            if op.kind in liger:
                cands["liger"] = rival_fn(op, params, liger[op.kind])
            if device.type == "cuda" and (not args.compile_ops or op.name in args.compile_ops.split(",")):
                torch._dynamo.config.cache_size_limit = 64
                cands["compile"] = rival_fn(op, params, torch.compile(op.impls["torch"], dynamic=False))
            ab_rounds(rec, op, cands, dtype, device, timing_kw, bw, 2 if args.smoke else args.ab_rounds)
    if device.type == "cuda":
        rec.doc["registers"] = kernel_registers()
        for r in rec.doc["registers"]:
            print(f"regs {r.get('kernel')} warps={r.get('num_warps')} stages={r.get('num_stages')} "
                  f"regs={r.get('n_regs')} spills={r.get('n_spills')} {r.get('error', '')}", flush=True)  # fmt: skip
    rec.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
