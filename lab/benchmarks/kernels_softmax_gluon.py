"""The warp-specialised Gluon softmax forward (:mod:`lab.kernels.softmax_gluon`) against solkit's default and the
copy floor, at vocabulary widths on the H200.

Per shape one bf16 input ``x = 4 randn`` (and a second for the rotating pool). Every Gluon variant is first checked
against a float64 reference over every row (output NaN-poisoned before; max error at most twice eager PyTorch's
own bf16 error + ``1e-3 max|ref|``; bad rows counted), then timed with
``solkit.harness.timing.benchmark(method="auto", l2_flush_mode="read")``; ``copy`` is ``y.copy_(x)`` into a
preallocated buffer (the forward's traffic, ``2MNe`` bytes) and ``default`` is
``softmax.dispatch.softmax_forward`` with no options. SOL against this run's copy bandwidth (calibrated) and
the 4.8 TB/s datasheet (helpers from ``kernels_softmax_wide.py``).

    python3 kernels_softmax_gluon.py --plan r1 --warm 0/3          # compile a third of the variants (few rows)
    python3 kernels_softmax_gluon.py --plan r1 --out r1.json --budget-s 150
    python3 -c "import kernels_softmax_gluon as b; b.compile_sm90(128256, mode=1)"  # offline sm_90 compile (no GPU)
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for lab.kernels

import torch  # noqa: E402
import triton  # noqa: E402
from kernels_softmax_wide import _err, measure_copy, sol_cols  # noqa: E402
from lab.kernels import softmax_gluon as G  # noqa: E402

from solkit.kernels.softmax.dispatch import softmax_forward  # noqa: E402
from solkit.timing import benchmark  # noqa: E402

SHAPES = {"vocab8k": (8192, 128256), "vocab4k": (4096, 128256), "256k": (1024, 262144), "small": (1000, 128256),
          "odd": (7, 65536), "one": (1, 262144)}  # fmt: skip


def _g(**kw) -> dict:
    # the options as measured: over the launcher's first defaults (balanced chunks, two exponentials an element,
    # one program an SM), so that a variant means what it meant in rounds 1-3 whatever GLUON_CONFIG says now
    return {"align": 0, "keep_e": 0, "per_sm": 1, **kw}


#: name -> launcher options (``softmax_forward_gluon``); knobs: split, box, nbox, stages, warps, lag, per_sm, align
#: (1: chunks of nbox x box blocks, no block read twice), mode (1: pass 1 in a partition of its own, stats_warps)
VARIANTS = {
    "g": _g(),
    "ga": _g(align=1),
    "ga_w8": _g(align=1, warps=8),
    "ga_lag2": _g(align=1, lag=2),
    "ga_lag0": _g(align=1, lag=0),
    "g_w8": _g(warps=8),
    "g_s33": _g(split=33, box=16),
    "ga_b32": _g(align=1, box=32),
    "ga_b8": _g(align=1, box=8),
    "ga_pm2": _g(align=1, per_sm=2),
    "ga_st4": _g(align=1, stages=4),
    "ws": _g(mode=1),
    "wsa": _g(mode=1, align=1),
    "wsa_s8": _g(mode=1, align=1, stats_warps=8),
    "wsa_w8": _g(mode=1, align=1, warps=8),
    "wsa_pm2": _g(mode=1, align=1, per_sm=2),
    "wsa_st5": _g(mode=1, align=1, stages=5),
    # keep_e: pass 1's exponentials replace x in shared memory, pass 2 scales them (one exponential an element)
    "wk": _g(mode=1, align=1, keep_e=1),
    "wk_pm2": _g(mode=1, align=1, keep_e=1, per_sm=2),
    "wk_pm2_s2": _g(mode=1, align=1, keep_e=1, per_sm=2, stats_warps=2),
    "wk_pm2_b8": _g(mode=1, align=1, keep_e=1, per_sm=2, box=8),
    "gk": _g(align=1, keep_e=1),
    "gk_pm2": _g(align=1, keep_e=1, per_sm=2),
    "gk_pm2_lag2": _g(align=1, keep_e=1, per_sm=2, lag=2),
    "gk_pm3": _g(align=1, keep_e=1, per_sm=3),
    "wk_pm2_b32": _g(mode=1, align=1, keep_e=1, per_sm=2, box=32),
    "gk_pm2_b32": _g(align=1, keep_e=1, per_sm=2, box=32),
    # round 3: the configuration of record (round 2's fastest at all three shapes: gk_pm3) and two untried neighbours
    "best": _g(align=1, keep_e=1, per_sm=3),
    "best256k": _g(align=1, keep_e=1, per_sm=3),
    "gk_pm4": _g(align=1, keep_e=1, per_sm=4),
    "gk_pm3_lag2": _g(align=1, keep_e=1, per_sm=3, lag=2),
    "gk_pm3_b32": _g(align=1, keep_e=1, per_sm=3, box=32, nbox=2),
}
FLOORS = ("copy",)
UNWARMED = ("wk_pm2_s2",)  # compiled in the timed run only (its warpgroup layout is untried)
BASE = ("default",)
_R1_8K = ["copy", "default", "g", "ga", "ga_w8", "ga_lag2", "ga_lag0", "g_w8", "g_s33", "ga_b32", "ga_b8", "ga_pm2",
          "ga_st4", "default", "copy"]  # fmt: skip
_R2_8K = ["copy", "default", "wsa_pm2", "wk", "wk_pm2", "wk_pm2_b8", "wk_pm2_b32", "gk", "gk_pm2", "gk_pm2_lag2",
          "gk_pm2_b32", "gk_pm3", "default", "copy"]  # fmt: skip
PLANS = {
    "r1": [
        ("odd", ["g", "ga", "ga_lag0"]),
        ("one", ["g", "ga_lag2"]),
        ("small", ["g", "ga"]),
        ("vocab8k", _R1_8K),
        ("256k", ["copy", "default", "g", "ga"]),
    ],
    "r1ws": [
        ("odd", ["ws", "wsa"]),
        ("small", ["wsa"]),
        ("vocab8k", ["copy", "default", "ws", "wsa", "wsa_s8", "wsa_w8", "wsa_pm2", "wsa_st5", "ga", "copy"]),
        ("256k", ["wsa"]),
    ],
    "r2": [
        ("odd", ["wk", "gk"]),
        ("small", ["wk_pm2", "gk_pm2"]),
        ("vocab8k", _R2_8K),
        ("vocab4k", ["copy", "default", "wk_pm2", "gk_pm2", "gk_pm3"]),
        ("256k", ["copy", "default", "wsa_pm2", "wk_pm2", "gk_pm2", "gk_pm3"]),
        ("vocab8k", ["wk_pm2_s2"]),  # last: the loader and two stats warps share a warpgroup
    ],
    "r3": [
        ("odd", ["best", "gk_pm4"]),
        ("vocab8k", ["copy", "default", "best", "best", "default", "copy", "gk_pm4", "gk_pm3_lag2", "gk_pm3_b32"]),
        ("vocab4k", ["copy", "default", "best", "default", "best"]),
        ("256k", ["copy", "default", "best256k", "default", "best256k", "gk_pm4"]),
    ],
    "smoke": [("odd", ["g"])],
}


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


T0 = time.perf_counter()


def gluon_fn(name: str):
    opts = VARIANTS[name]

    def run(x, y):
        facts = G.softmax_forward_gluon(x, y, **opts)
        if facts is None:
            raise RuntimeError("softmax_forward_gluon declined")
        return y

    return run


class Ref:
    """The shape's input, float64 reference and eager PyTorch's own bf16 error."""

    def __init__(self, shape, dtype, device, seed=0):
        gen = torch.Generator(device=device).manual_seed(seed)
        self.x = torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 4
        self.y64 = torch.softmax(self.x.double(), -1)
        self.torch_err = _err(torch.softmax(self.x, -1), self.y64)
        self.ref_max = float(self.y64.abs().max())


def check(name: str, ref: Ref) -> dict:
    y = torch.full_like(ref.x, float("nan"))
    facts = G.softmax_forward_gluon(ref.x, y, **VARIANTS[name])
    if facts is None:
        return {"ok": False, "error": "declined"}
    torch.cuda.synchronize()
    diff = (y.double() - ref.y64).abs()
    err = float(diff.max())
    budget = 2 * ref.torch_err + 1e-3 * ref.ref_max
    bad = int(((diff.amax(-1) > budget) | (~torch.isfinite(y)).any(-1)).sum())
    return {"ok": bad == 0 and err <= budget, "max_abs_err": err, "err_budget": budget, "bad_rows": bad,
            "torch_err": ref.torch_err, "launch": {k: v for k, v in facts.items() if k != "per_sm_limits"}}  # fmt: skip


def warm(part: str, plan: str) -> None:
    k, n = (int(v) for v in part.split("/"))
    jobs = sorted({(s, v) for s, vs in PLANS[plan] for v in vs if v in VARIANTS and v not in UNWARMED})
    for s, v in jobs[k::n]:
        cols = SHAPES[s][1]
        rows = SHAPES[s][0]
        rows = rows if rows < 64 else (64 if rows % 16 == 0 else 63)  # the same integer specialisation as the run
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        try:
            gluon_fn(v)(x, torch.empty_like(x))
        except Exception as exc:  # noqa: BLE001
            print(f"warm {s} {v}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    torch.cuda.synchronize()
    log(f"warm {part}: {len(jobs[k::n])} done")


def compile_sm90(n_cols: int = 128256, *, dtype: str = "bf16", warps: int = 4, lag: int = 1, sms: int = 132,
                 maxnreg: int | None = None, mode: int = 0, stats_warps: int = 4, keep_e: int = 0,
                 **plan_opts: Any) -> Any:  # fmt: skip
    """Compile the kernel for sm_90 without a GPU (to read its PTX / SASS and catch API errors early), with the
    launcher's choices (plan, registers); returns (compiled kernel, plan)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    p = G.plan(n_cols, sms, warps=warps + (stats_warps if mode else 0), **plan_opts)
    assert p is not None, "no plan"
    sp2 = max(triton.next_power_of_2(p["split"]), 2)
    sig = {"x_desc": f"tensordesc<i32[1, {p['box']}, 128],{G._layout()!r}>", "yu_ptr": "*i32", "part_ptr": "*i64",
           "n_rows": "i32", "n_blocks": "i32", "y_stride": "i32", "max_spins": "i32"}  # fmt: skip
    consts = dict(SPLIT=p["split"], SP2=sp2, NBOX=p["nbox"], STAGES=p["stages"], LAG=lag,
                  IS_BF16=int(dtype == "bf16"), HINT=1, WARPS=warps, LOADER_REGS=40, MODE=mode, SWARPS=stats_warps,
                  STATS_REGS=G._stats_regs(warps, stats_warps, p["per_sm"]), ALIGN=p["align"],
                  KEEPE=keep_e)  # fmt: skip
    sig.update({k: "constexpr" for k in consts})
    aligned = [["tt.divisibility", 16]]  # as the launcher specialises 16-byte aligned pointers and strides
    attrs = {(1,): aligned, (2,): aligned, (5,): aligned}
    src = GluonASTSource(G._softmax_fwd_gluon_kernel, sig, consts, attrs)
    launched = G._launched_warps(warps, mode, stats_warps)
    if maxnreg is None and p["per_sm"] > 1:
        maxnreg = 65536 // (p["per_sm"] * launched * 32) // 8 * 8
    options = {"num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options), p


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", default="r1", choices=sorted(PLANS))
    p.add_argument("--out", default="")
    p.add_argument("--budget-s", type=float, default=1e9)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warm", default="")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device (Gluon does not run in the interpreter)")
        return 0
    if args.warm:
        warm(args.warm, args.plan)
        return 0
    device = torch.device("cuda")
    timing_kw = dict(method="auto", reps=args.reps, trials=3, warmup=3, calls_per_graph=10, l2_flush_mode="read")
    doc = {"benchmark": "kernels_softmax_gluon", "plan": args.plan, "command": " ".join(sys.argv),
           "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0), "timing": timing_kw, "dtype": "bfloat16",
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "variants": VARIANTS, "rows": []}  # fmt: skip

    def flush():
        doc["elapsed_s"] = round(time.perf_counter() - T0, 1)
        if args.out:
            with open(args.out + ".tmp", "w") as fh:
                json.dump(doc, fh, indent=1, default=str)
            os.replace(args.out + ".tmp", args.out)

    bw, info = measure_copy(device, timing_kw)
    doc["copy_bandwidth_Bps"], doc["copy_timing"] = bw, info
    log(f"copy bandwidth {bw / 1e12:.3f} TB/s")
    flush()
    for shape_name, names in PLANS[args.plan]:
        if time.perf_counter() - T0 > args.budget_s:
            break
        M, N = SHAPES[shape_name]
        ref = Ref((M, N), torch.bfloat16, device)
        pool = [(ref.x, torch.empty_like(ref.x)), (torch.randn_like(ref.x) * 4, torch.empty_like(ref.x))]
        nbytes = 2 * M * N * 2
        timeable = M >= 1000
        for name in names:
            if time.perf_counter() - T0 > args.budget_s:
                break
            row = {"shape_name": shape_name, "shape": [M, N], "variant": name, "bytes": nbytes,
                   "options": VARIANTS.get(name, name)}  # fmt: skip
            t = time.perf_counter()
            try:
                if name in FLOORS:
                    fn, row["ok"] = (lambda x, y: y.copy_(x)), None
                elif name in BASE:
                    fn = lambda x, y: softmax_forward(x)  # noqa: E731
                    out = softmax_forward(ref.x)
                    e = _err(out, ref.y64)
                    row.update({"ok": e <= 2 * ref.torch_err + 1e-3 * ref.ref_max, "max_abs_err": e})
                else:
                    row.update(check(name, ref))
                    fn = gluon_fn(name)
                if timeable and row["ok"] is not False:
                    res = benchmark(fn, pool, **timing_kw)
                    row.update({"median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms, "cv": res.cv,
                                "method": res.method, "l2_flush_mode": "read",
                                **sol_cols(nbytes, res.median_ms, bw)})  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - a failing variant is a row, never a crash
                row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                traceback.print_exc(limit=2)
            row["wall_s"] = round(time.perf_counter() - t, 2)
            doc["rows"].append(row)
            flush()
            log(f"{shape_name:8s} {name:10s} ok={row.get('ok')} us={1e3 * row.get('median_ms', float('nan')):.1f} "
                f"sol={row.get('sol_calibrated', float('nan')):.3f} err={row.get('max_abs_err', float('nan')):.2e} "
                f"bad={row.get('bad_rows', '')} {row.get('launch', '')} {row.get('error', '')[:200]}")  # fmt: skip
        del ref, pool
        torch.cuda.empty_cache()
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
