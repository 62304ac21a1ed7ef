# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""RoPE at the suite's head layouts (Llama-3-8B: 32 q / 8 kv heads; Llama-3-70B: 64 / 8; head_dim 128,
8192 tokens, bf16, half-split, the suite's real cos/sin tables), forward and forward + backward:
solkit's launch-setting variants against Liger-Kernel, eager PyTorch and torch.compile.

Every row is checked first (outputs and gradients against a float64 computation; pass when the
relative error is at most twice eager PyTorch's own bf16 error plus 1e-4, as
``lab/benchmarks/kernels_gates.py`` checks), then timed with the harness's protocol
(``solkit.harness.timing.benchmark(method="auto")``: per-call CUDA events inside a CUDA graph for calls
under 0.1 ms, read L2 flush, two rotating input sets). SOL on the copy bandwidth measured in the same
run and on the 4.8 TB/s datasheet figure. The JSON is rewritten after every row.

    python3 lab/benchmarks/kernels_rope.py --out rope.json [--shapes 70b,8b] [--variants] [--compile] [--budget-s 40]
    python3 lab/benchmarks/kernels_rope.py --smoke      # CPU interpreter, tiny shapes: logic check only
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

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import kernels_gates as kg  # noqa: E402  (the RoPE backends, checks and timing of the gates benchmark)
import torch  # noqa: E402
import triton  # noqa: E402

from solkit.kernels.rope import apply_rope  # noqa: E402
from solkit.kernels.rope import rotary as rope_mod  # noqa: E402
from solkit.kernels.rope.rotary import rope_bytes  # noqa: E402

#: (batch, seq, q heads, kv heads, head_dim), as in src/solkit/problems/suite/rope*/workload.jsonl (l class).
SHAPES = {"70b": (1, 8192, 64, 8, 128), "8b": (1, 8192, 32, 8, 128)}
SMOKE_SHAPES = {"70b": (1, 16, 8, 2, 16), "8b": (1, 16, 4, 2, 16)}
#: Launch-setting variants timed next to the default (keys of ``ROPE_CONFIG``), per head layout.
VARIANTS = {
    # round 1 (benchmarks/results/gates_rope/2026-11-30_h200_rope_0715.json) timed the forward of six more (16 and 32 warps, capped registers,
    # two tokens a program: all slower); their forward + backward rows had failed on a benchmark bug.
    "70b": [{"num_warps": 8, "max_tile": 8192}, {"num_warps": 4, "max_tile": 4096}],
    "8b": [{"num_warps": 16, "max_tile": 8192}, {"num_warps": 4, "max_tile": 4096}],
}
T0 = time.perf_counter()


def suite_tables(seq: int, dim: int, dev: str, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The suite's cos/sin: Llama-3 frequencies (theta 500000), first half repeated."""
    inv = 1.0 / (500000.0 ** (torch.arange(0, dim, 2, device=dev, dtype=torch.float32) / dim))
    ang = torch.outer(torch.arange(seq, device=dev, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), -1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def with_config(cfg: dict | None):
    """``apply_rope`` under launch settings ``cfg`` (None: the module's per-shape defaults)."""
    if cfg is None:
        return apply_rope

    def run(q, k, cos, sin):
        saved = list(rope_mod.ROPE_SHAPE_CONFIG)
        rope_mod.ROPE_SHAPE_CONFIG[:] = [{"max_token_elems": 1 << 40, **cfg}]
        try:
            return apply_rope(q, k, cos, sin)
        finally:
            rope_mod.ROPE_SHAPE_CONFIG[:] = saved

    return run


def ab_rounds(doc, label, cands, base, grads, backward: bool, rounds: int) -> None:
    """Candidates timed in alternating turns (order rotated every round; one trial of 20 samples of the
    harness protocol per turn), so drift and neighbours hit each alike; per candidate the median of its
    turn medians, their range, and the per-round ratio to each rival (min, median, max)."""
    from solkit.timing import benchmark

    mode = "fwd+bwd" if backward else "fwd"
    calls, pools = {}, {}
    for name, fn in cands:
        pools[name] = [tuple(t.clone().requires_grad_(backward and i < 2) for i, t in enumerate(base))
                       for _ in range(2)]  # fmt: skip
        g = [t.clone() for t in grads]
        if backward:
            calls[name] = lambda *xs, f=fn, g=g: torch.autograd.grad(kg._outputs(f(*xs)), xs[:2], g)
        else:
            calls[name] = lambda *xs, f=fn: _no_grad(f, xs)
    turns = {name: [] for name in calls}
    names = list(calls)
    for k in range(rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            r = benchmark(calls[name], pools[name], method="auto", reps=20, trials=1, warmup=2, calls_per_graph=10,
                          l2_flush_mode="read")  # fmt: skip
            turns[name].append(r.median_ms)
    for name, ms in turns.items():
        srt = sorted(ms)
        row = {"shape": label, "backend": name, "mode": mode, "ab_rounds": rounds, "turn_ms": ms,
               "median_ms": srt[len(srt) // 2], "min_ms": srt[0], "max_ms": srt[-1], "method": r.method}  # fmt: skip
        for other, oms in turns.items():
            if other != name:
                ratios = sorted(a / b for a, b in zip(ms, oms))
                row[f"ratio_to_{other}"] = {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]}
        doc.setdefault("ab", []).append(row)
        rel = " ".join(f"{k[9:]}={v['min']:.3f}/{v['median']:.3f}/{v['max']:.3f}" for k, v in row.items()
                       if k.startswith("ratio_to_"))  # fmt: skip
        print(f"[{time.perf_counter() - T0:6.1f}s] ab rope {label} {name:8s} {mode:7s} us={row['median_ms'] * 1e3:.1f} "
              f"[{srt[0] * 1e3:.1f}, {srt[-1] * 1e3:.1f}] {rel}", flush=True)  # fmt: skip


def _no_grad(f, xs):
    with torch.no_grad():
        return f(*xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--shapes", default="70b,8b")
    ap.add_argument("--variants", action="store_true", help="also time the VARIANTS launch settings")
    ap.add_argument("--backends", default="solkit,liger,eager", help="comma list (compile with --compile)")
    ap.add_argument("--compile", action="store_true", help="torch.compile rows last, while the budget allows")
    ap.add_argument("--compile-reserve-s", type=float, default=12.0)
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--ab-shapes", default="70b", help="shapes that get the A/B rounds")
    ap.add_argument("--ab", type=int, default=0, help="after the rows: this many alternating A/B rounds of the "
                    "correct solkit default, Liger and compile rows")  # fmt: skip
    ap.add_argument("--precompile", action="store_true", help="only torch.compile, filling Inductor's caches")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    kg.QUICK = args.smoke or dev == "cpu"
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    doc = {
        "benchmark": "kernels_rope",
        "device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "liger": kg._liger_version(), "command": " ".join(["python3"] + sys.argv),
        "timing_protocol": "solkit.harness.timing.benchmark(method='auto', l2_flush_mode='read'): graph_events "
                           "(per-call CUDA events inside a CUDA graph) under 0.1 ms, events otherwise; 2 rotating "
                           "input sets; median of 30 reps x 2 trials",
        "criteria": "rel. L2 error of every output and gradient <= 2 x eager bf16's + 1e-4 (float64 reference)",
        "rope_config": dict(rope_mod.ROPE_CONFIG), "rope_shape_config": list(rope_mod.ROPE_SHAPE_CONFIG),
        "rows": [],
    }  # fmt: skip

    def save():
        doc["elapsed_s"] = round(time.perf_counter() - T0, 2)
        if args.out:
            with open(args.out + ".tmp", "w") as fh:
                json.dump(doc, fh, indent=1, default=str)
            os.replace(args.out + ".tmp", args.out)

    bw = kg.measure_copy_bandwidth(dev) if dev == "cuda" and not args.precompile else 1e12
    doc["copy_bandwidth_Bps"] = bw
    backends = args.backends.split(",")
    compiled: dict = {}
    for label in args.shapes.split(","):
        B, S, HQ, HK, D = shapes[label]
        q, k = kg._randn((B, S, HQ, D), dev, dtype), kg._randn((B, S, HK, D), dev, dtype)
        cos, sin = suite_tables(S, D, dev, dtype)
        base = [q, k, cos, sin]
        grads = [kg._randn(q.shape, dev, dtype), kg._randn(k.shape, dev, dtype)]
        op = {"n_grad": 2, "bytes_fwd": rope_bytes(B, S, HQ, HK, D, dtype),
              "bytes_fwdbwd": rope_bytes(B, S, HQ, HK, D, dtype, backward=True)}  # fmt: skip
        fns = {"solkit": with_config(None), "eager": kg.eager_rope}
        if kg.liger is not None:
            fns["liger"] = kg.liger_rope_bshd
        cands = [(b, fns[b]) for b in backends if b in fns]
        if args.variants:
            cands += [(f"solkit{json.dumps(c, sort_keys=True)}", with_config(c)) for c in VARIANTS[label]]
        if args.compile and dev == "cuda":
            cands.append(("compile", None))
        if args.precompile:  # a warm-up process: the compile rows of a later run hit Inductor's disk caches
            fn = torch.compile(kg.eager_rope, dynamic=False)
            for backward in (False, True):
                kg.run_once(fn, base, 2, backward, grads)
            print(f"[{time.perf_counter() - T0:6.1f}s] precompiled rope {label}", flush=True)
            continue
        refs = {}
        for backward in (False, True):
            refs[backward] = (kg.reference(kg.eager_rope, base, 2, backward, grads, torch.float64),
                              kg.run_once(kg.eager_rope, base, 2, backward, grads))  # fmt: skip
        for name, fn in cands:
            for backward in (False, True):
                mode = "fwd+bwd" if backward else "fwd"
                row = {"shape": label, "dims": [B, S, HQ, HK, D], "backend": name, "mode": mode}
                spent = time.perf_counter() - T0
                if spent > args.budget_s - (args.compile_reserve_s if name == "compile" else 0):
                    row["error"] = "skipped: time budget"
                    doc["rows"].append(row)
                    continue
                try:
                    if name == "compile":
                        fn = compiled.setdefault(label, torch.compile(kg.eager_rope, dynamic=False))
                    (r_out, r_grads), (t_out, t_grads) = refs[backward]
                    # Private output gradients: Liger's backward rotates them in place, and timed on shared
                    # ones it would leave every later row checked against references of other gradients.
                    row_grads = [g.clone() for g in grads]
                    kg.poison_allocator(sum(t.numel() * t.element_size() for t in base), dev)
                    got_out, got_grads = kg.run_once(fn, base, 2, backward, row_grads)
                    ok, errs, t_errs = kg.max_ratio_check(got_out + got_grads, r_out + r_grads, t_out + t_grads)
                    row.update(correct=ok, rel_err=errs, torch_rel_err=t_errs)
                    del got_out, got_grads
                    if ok:
                        kg._time_row(row, op, "rope", fn, base, backward, row_grads, dev, bw)
                    del row_grads
                except Exception as exc:  # noqa: BLE001 - a failing backend is a row, never a crash
                    row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                    traceback.print_exc(limit=2)
                doc["rows"].append(row)
                save()
                us, sol = row.get("median_ms", float("nan")) * 1e3, row.get("sol_calibrated", float("nan"))
                print(f"[{time.perf_counter() - T0:6.1f}s] rope {label} {name:44s} {mode:7s} ok={row.get('correct')} "
                      f"us={us:7.1f} sol={sol:.3f} {row.get('error', '')[:60]}", flush=True)  # fmt: skip
        in_time = time.perf_counter() - T0 < args.budget_s
        if args.ab and dev == "cuda" and label in args.ab_shapes.split(",") and in_time:
            ok_names = {r["backend"] for r in doc["rows"] if r["shape"] == label and r.get("correct")}
            ab = [(n, f) for n, f in cands if n in ("solkit", "liger", "compile") and n in ok_names]
            ab = [(n, compiled[label] if n == "compile" else f) for n, f in ab]
            for backward in (False, True):
                ab_rounds(doc, label, ab, base, grads, backward, args.ab)
                save()
        del q, k, base, grads, refs
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
