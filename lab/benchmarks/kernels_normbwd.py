# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
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

    python3 lab/benchmarks/kernels_normbwd.py --warm 0/4                 # compile a quarter of the variants
    python3 lab/benchmarks/kernels_normbwd.py --out nb.json --budget-s 60 [--ops rmsnorm,layernorm]
    python3 lab/benchmarks/kernels_normbwd.py --smoke                    # CPU interpreter, tiny shapes
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from kernels_norm_common import (  # noqa: E402
    EPS,
    Recorder,
    elapsed,
    make_inputs,
    make_ops,
    poison_free_memory,
    record_bandwidth,
    run_meta,
    sol_cols,
    timing_options,
)

from solkit.kernels.norms import backward as nb_mod  # noqa: E402
from solkit.kernels.norms import layer_norm as ln_mod  # noqa: E402
from solkit.kernels.norms.layer_norm import layernorm_backward, layernorm_forward  # noqa: E402
from solkit.kernels.norms.rms_norm import rmsnorm_backward, rmsnorm_forward  # noqa: E402
from solkit.timing import benchmark  # noqa: E402

SHAPES = {"norm": {"": (8192, 4096), "_70b": (8192, 8192)}, "softmax": {}}
SMOKE_SHAPES = {"norm": {"": (40, 96), "_70b": (12, 300)}, "softmax": {}}


def _v(**kw) -> dict:
    return kw


#: Backward launcher variants per op; ``{}`` (the committed default) first. Round 1 (benchmarks/results/norms/2026-11-30_h200_bwd_1235.json,
#: backward alone, us): RMSNorm default 53.60, balanced 53.46, fused reduction 54.48, both 53.50, prefetch 2 with
#: the weight re-read 55.98, 1 program x 32 warps x 2 rows x prefetch 2 60.82, two-pass 67.54 (8 warps x 4 an SM
#: 60.50), dW reduction tile 64 x 64 58.14; LayerNorm default 57.50, fused + balanced 55.92, 16 warps 63.26, the
#: 32-warp shapes 96-127; add+RMSNorm 68.45, fused + balanced 66.75 (adopted at 4096 wide). Round 2: the weight
#: re-read with the ring of one, a third LayerNorm program an SM, the 70B widths, and the TMA kernel
#: (``tma_stages``: rows pipelined through shared memory by Triton, which does not pipeline plain loads that feed
#: no dot: their PTX has no cp.async).
VARIANTS = {
    "rmsnorm": [
        {}, _v(w_reload=True), _v(fused_reduce=False, balanced=False, w_reload=True),
        _v(tma_stages=3), _v(tma_stages=4), _v(tma_stages=5), _v(tma_stages=6), _v(tma_stages=4, balanced=False),
        _v(tma_stages=4, num_warps=32, programs_per_sm=1), _v(tma_stages=4, num_warps=8, programs_per_sm=2),
        _v(tma_stages=3, num_warps=8, programs_per_sm=3),
    ],
    "add_rmsnorm": [{}, _v(w_reload=True), _v(tma_stages=3), _v(tma_stages=4), _v(tma_stages=5)],
    "layernorm": [
        {}, _v(w_reload=True), _v(fused_reduce=False, balanced=False, w_reload=True),
        _v(num_warps=8, programs_per_sm=3, w_reload=True), _v(num_warps=4, programs_per_sm=4, w_reload=True),
        _v(tma_stages=3), _v(tma_stages=4), _v(tma_stages=5), _v(tma_stages=4, num_warps=16),
        _v(tma_stages=4, num_warps=32, programs_per_sm=1),
    ],
    "rmsnorm_70b": [
        {}, _v(fused_reduce=True), _v(fused_reduce=True, balanced=True), _v(w_reload=True), _v(tma_stages=3),
        _v(tma_stages=4), _v(tma_stages=3, num_warps=16, programs_per_sm=2, fused_reduce=True, balanced=True),
    ],
    "layernorm_70b": [
        {}, _v(fused_reduce=True), _v(fused_reduce=True, balanced=True), _v(w_reload=True), _v(tma_stages=3),
        _v(tma_stages=4),
    ],
}  # fmt: skip
#: Forward launch shapes (``--fwd-ops``): LayerNorm at 4096 wide is the narrowest forward margin of the issue's
#: table (0.924, one-block kernel 2 rows x 8 warps); the one-piece two-pass kernel (``chunk`` = the row) won for
#: RMSNorm at 4096 and LayerNorm at 8192.
FWD_VARIANTS = {
    "layernorm": [{}, _v(chunk=4096, num_warps=8), _v(chunk=4096, num_warps=4), _v(chunk=4096, num_warps=16)],
}

_FB = _v(fused_reduce=True, balanced=True)
_BEFORE = _v(fused_reduce=False, balanced=False)  # the default before session 5: separate reduction kernel
#: A/B candidates per op (``--ab``), the committed default first. Round 1 (benchmarks/results/norms/2026-11-30_h200_bwd_1235.json): the
#: fused reduction with the balanced grid took LayerNorm's backward from 57.50 to 55.92 us and add+RMSNorm's
#: from 68.45 to 66.75; RMSNorm's stayed at 53.5-53.6 us. Adopted at 4096 wide after round 1 and confirmed by
#: round 2's A/B; at 8192 wide round 2 adopted the TMA kernel for LayerNorm (115.1 against 120.8 us).
AB_CANDIDATES = {
    "rmsnorm": [{}, _BEFORE],
    "layernorm": [{}, _BEFORE],
    "add_rmsnorm": [{}, _BEFORE],
    "rmsnorm_70b": [{}, _FB, _v(tma_stages=4)],
    "layernorm_70b": [{}, _v(tma_stages=0), _FB],
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
    return {"x": x, "params": params, "stats": (rstd,), "dy": grads[-1], "ds": ds, "residual": acts[-1],
            "x_in": acts[0]}  # fmt: skip


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
        if with_forward and op.kind == "add_rmsnorm":  # x + residual -> (y, s, rstd), then the backward on s
            _, x, rstd = rmsnorm_forward(x, w, EPS, residual=d["residual"])
            return rmsnorm_backward(dy, x, w, rstd, ds=ds, **cfg)
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


def _x_for(op, d, mode):
    """The activation a call takes: the normalised input, or for add+RMSNorm forward + backward its x (the sum
    is formed by the call)."""
    return d["x_in"] if op.kind == "add_rmsnorm" and mode == "fwdbwd" else d["x"]


def ab_op(rec, op, cfgs, dtype, device, timing_kw, bw, rounds, mode) -> None:
    """Alternating turns of the candidates (order rotated each round; one trial of the protocol per turn), each
    checked first: per candidate the median of its turn medians, their range, and per-round ratios to the first
    candidate (the committed default)."""
    d = setup(op, dtype, device, 7)
    ref, eager = references(op, d)
    pool = []
    for k in range(2):
        dk = setup(op, dtype, device, 50 + k)
        pool.append((_x_for(op, dk, mode), dk["dy"], dk["ds"]))
    fns, names = {}, []
    for cfg in cfgs:
        name = json.dumps(cfg, sort_keys=True)
        fn = launcher(op, d, cfg, with_forward=mode == "fwdbwd")
        x_in = _x_for(op, d, mode)
        fn(x_in, d["dy"], d["ds"])
        poison_free_memory(8 * op.shape[0] * op.shape[1], device)
        res = check([t for t in fn(x_in, d["dy"], d["ds"]) if t is not None], ref, eager)
        if res["ok"]:
            fns[name] = fn
            names.append(name)
        else:
            rec.add("ab", {"op": op.name, "mode": mode, "config": cfg, **res})
    turns = {n: [] for n in names}
    for k in range(rounds):
        for n in names[k % len(names) :] + names[: k % len(names)]:
            r = benchmark(fns[n], pool, **{**timing_kw, "trials": 1})
            turns[n].append(r.median_ms)
    for n in names:
        ms = sorted(turns[n])
        ratios = sorted(a / b for a, b in zip(turns[n], turns[names[0]]))
        row = {"op": op.name, "mode": mode, "config": json.loads(n), "ok": True, "bytes": bytes_of(op, mode, 2),
               "median_ms": ms[len(ms) // 2], "min_ms": ms[0], "max_ms": ms[-1], "turn_ms": turns[n],
               "ratio_to_default": {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]},
               "method": r.method, "rounds": rounds}  # fmt: skip
        if device.type == "cuda":
            row.update(sol_cols(row["bytes"], row["median_ms"], bw))
        rec.add("ab", row)
        rr = row["ratio_to_default"]
        print(f"[{elapsed():6.1f}s] ab {op.name:14s} {mode:6s} {n} us={row['median_ms'] * 1e3:.2f} "
              f"[{ms[0] * 1e3:.2f}, {ms[-1] * 1e3:.2f}] sol={row.get('sol_calibrated', float('nan')):.3f} "
              f"vs default {rr['min']:.3f}/{rr['median']:.3f}/{rr['max']:.3f}", flush=True)  # fmt: skip


def sweep_op(rec, op, dtype, device, timing_kw, bw, budget_s, modes) -> None:
    d = setup(op, dtype, device, 7)
    ref, eager = references(op, d)
    pools = {m: [] for m in modes}
    for k in range(2):
        dk = setup(op, dtype, device, 50 + k)
        for m in modes:
            pools[m].append((_x_for(op, dk, m), dk["dy"], dk["ds"]))
    for cfg in VARIANTS[op.name]:
        for mode in modes:
            if elapsed() > budget_s:
                rec.add("sweep", {"op": op.name, "config": cfg, "mode": mode, "error": "skipped: time budget"})
                continue
            row = {"op": op.name, "shape": list(op.shape), "mode": mode, "config": cfg,
                   "bytes": bytes_of(op, mode, d["x"].element_size())}  # fmt: skip
            try:
                fn = launcher(op, d, cfg, with_forward=mode == "fwdbwd")
                x_in = _x_for(op, d, mode)
                fn(x_in, d["dy"], d["ds"])  # compile (or load from the cache)
                poison_free_memory(8 * op.shape[0] * op.shape[1], device)
                outs = [t for t in fn(x_in, d["dy"], d["ds"]) if t is not None]
                row.update(check(outs, ref, eager))
                if row["ok"]:
                    r = benchmark(fn, pools[mode], **timing_kw)
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
    jobs = [(op, cfg) for op in ops for cfg in VARIANTS.get(op.name, []) + AB_CANDIDATES.get(op.name, [])]
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
    p.add_argument("--ab", default="", help="ops for A/B rounds of AB_CANDIDATES (after the sweep, if any)")
    p.add_argument("--ab-rounds", type=int, default=6)
    p.add_argument("--ab-modes", default="bwd")
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--fwd-ops", default="", help="also sweep FWD_VARIANTS of these forwards (kernels_norm_r5)")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ops = {o.name: o for o in make_ops(SMOKE_SHAPES if args.smoke else SHAPES, dtype)}
    wanted = [ops[name] for name in args.ops.split(",") if name in ops and name in VARIANTS]
    if args.warm and args.ab:  # the A/B candidates compile too
        wanted += [ops[n] for n in args.ab.split(",") if n in ops and n not in args.ops.split(",")]
    if args.warm:
        warm(wanted, dtype, device, args.warm)
        return 0
    timing_kw = timing_options(args.smoke, args.reps)
    meta = run_meta(
        "kernels_normbwd", device, dtype, timing_kw,
        criteria="max|grad-ref| <= 2*max|eager_bf16-ref| + 4e-3*max|ref| for dx, dw (db); ref = float64",
        bytes="bwd: read x, dy (ds), stats, params; write dx, dw (db). fwdbwd: the op's forward + backward bytes",
    )  # fmt: skip
    rec = Recorder(args.out, meta)
    bw = record_bandwidth(rec, device, timing_kw)
    if not args.no_sweep:
        for op in wanted:
            sweep_op(rec, op, dtype, device, timing_kw, bw, args.budget_s, args.modes.split(","))
    rec.doc["ab"] = []
    fwd_ops = [ops[n] for n in args.fwd_ops.split(",") if n in ops and n in FWD_VARIANTS]
    if fwd_ops:  # forward launch shapes, with kernels_norm_r5's sweep (check against float64, then the timing)
        import kernels_norm_r5 as r5

        for op in fwd_ops:
            r5.VARIANTS[op.name] = FWD_VARIANTS[op.name]
            r5.sweep_op(rec, op, dtype, device, timing_kw, bw, args.budget_s)
    for name in [n for n in args.ab.split(",") if n in ops and n in AB_CANDIDATES]:
        for mode in args.ab_modes.split(","):
            if elapsed() < args.budget_s:
                ab_op(rec, ops[name], AB_CANDIDATES[name], dtype, device, timing_kw, bw,
                      2 if args.smoke else args.ab_rounds, mode)  # fmt: skip
    if device.type == "cuda":
        rec.doc["registers"] = kernel_registers()
        for r in rec.doc["registers"]:
            print(f"regs {r.get('kernel')} warps={r.get('num_warps')} regs={r.get('n_regs')} "
                  f"spills={r.get('n_spills')} {r.get('key', '')[-160:]} {r.get('error', '')}", flush=True)  # fmt: skip
    rec.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
