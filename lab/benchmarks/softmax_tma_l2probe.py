"""Where the TMA softmax forward's extra DRAM reads come from: the L2 prefetch distance (job lead20).

Nsight Compute (lead18, session 7) measured the default 8192 x 128256 bf16 forward reading 2.265 GB from DRAM for
2.101 GB of input (7.8 % extra) with the L2 at 92 % of its throughput; the copy of the same bytes is the
reference. This times (the harness's median, read flush) and, under ``--ncu-target``, runs once each: the copy
and the TMA forward with the prefetch distance / pipeline stages varied.

    python3 softmax_tma_l2probe.py --out probe.json      # timings
    ncu --metrics ... python3 softmax_tma_l2probe.py --ncu-target
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform

import torch
import triton

from solkit.kernels.softmax.dispatch import softmax_forward
from solkit.timing import benchmark

BASE = {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3, "l2_prefetch": 1}  # TMA_DEFAULT at 65537-196607
BASE_256K = {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3, "l2_prefetch": 1}  # TMA_DEFAULT from 196608
#: lead21: fewer programs per SM (a smaller L2 footprint of rows in flight), at the two vocabulary shapes.
SWEEP = {
    "default": {},
    "pw7": {"per_sm": 7},
    "pw6": {"per_sm": 6},
    "pw5": {"per_sm": 5},
    "pw4": {"per_sm": 4},
    "pw6_st4": {"per_sm": 6, "stages": 4},
    "pw5_st4": {"per_sm": 5, "stages": 4},
    "pw4_st5": {"per_sm": 4, "stages": 5},
    "pw6_pf0_st4": {"per_sm": 6, "stages": 4, "l2_prefetch": 0},
    "w4_pw3": {"num_warps": 4, "per_sm": 3},
    "w4_pw3_st4": {"num_warps": 4, "per_sm": 3, "stages": 4},
}
SWEEP_256K = {
    "default": {},
    "pw3": {"per_sm": 3},
    "pw3_st4": {"per_sm": 3, "stages": 4},
    "bl16_w2_pw6": {"blocks": 16, "num_warps": 2, "per_sm": 6},
    "bl16_w2_pw5": {"blocks": 16, "num_warps": 2, "per_sm": 5},
}
VARIANTS = {
    "default": {},
    "st2_pf1": {"stages": 2},
    "st2_pf2": {"stages": 2, "l2_prefetch": 2},
    "st3_pf2": {"l2_prefetch": 2},
    "st3_pw6": {"per_sm": 6},
    "st4_pf1_pw6": {"stages": 4, "per_sm": 6},
    "bl8_w1": {"blocks": 8, "num_warps": 1, "per_sm": 16},
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="")
    p.add_argument("--ncu-target", action="store_true")
    p.add_argument("--sweep", action="store_true", help="lead21: programs-per-SM sweep (SWEEP / SWEEP_256K)")
    p.add_argument("--compile-only", default="", help="k/n: compile the k-th of n slices of the variants, tiny rows")
    p.add_argument("--variants", default="", help='JSON {"name": {TMA options over the base}} (replaces the set)')
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=128256)
    args = p.parse_args()
    global BASE, VARIANTS
    if args.sweep:
        BASE, VARIANTS = (BASE_256K, SWEEP_256K) if args.cols >= 196608 else (BASE, SWEEP)
    if args.variants:
        VARIANTS = {"default": {}, **json.loads(args.variants)}
    shape = (args.rows, args.cols)
    if args.compile_only:  # the width is compiled in: a few rows of the same width compile the same kernels
        k, n = map(int, args.compile_only.split("/"))
        x = torch.randn(64, args.cols, device="cuda", dtype=torch.bfloat16)
        for name in list(VARIANTS)[k::n]:
            try:
                softmax_forward(x, tma={**BASE, **VARIANTS[name]})
            except Exception as exc:  # noqa: BLE001 - reported again (and dropped) by the timing run
                print(name, "failed:", str(exc).splitlines()[-1][:200], flush=True)
        torch.cuda.synchronize()
        return 0
    xs = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 4 for _ in range(2)]
    dst = torch.empty_like(xs[0])
    ref = torch.softmax(xs[0].double(), -1)
    errs = {}
    for name, over in list(VARIANTS.items()):
        try:
            y = softmax_forward(xs[0], tma={**BASE, **over})
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is dropped, not the run
            print(name, "failed:", str(exc).splitlines()[-1][:200], flush=True)
            del VARIANTS[name]
            continue
        errs[name] = float((y.double() - ref).abs().max())
    del ref
    if args.ncu_target:  # one more call each, the ones profiled (the first calls above compiled)
        dst.copy_(xs[1])
        for over in VARIANTS.values():
            softmax_forward(xs[1], tma={**BASE, **over})
        torch.cuda.synchronize()
        return 0
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    doc = {"benchmark": "softmax_tma_l2probe", "date_utc": now,
           "device": torch.cuda.get_device_name(0), "shape": list(shape), "dtype": "bfloat16", "base": BASE,
           "command": "python3 lab/benchmarks/softmax_tma_l2probe.py " + " ".join(__import__("sys").argv[1:]),
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "timing": {"method": "auto", "reps": 40, "trials": 3, "l2_flush_mode": "read"}, "rows": []}  # fmt: skip
    pool = [(x,) for x in xs]
    for rnd in range(2):
        r = benchmark(lambda a: dst.copy_(a), pool, method="auto", reps=40, trials=3)
        bw = 2 * xs[0].numel() * 2 / (r.median_ms * 1e-3)
        doc["rows"].append({"variant": "copy", "round": rnd, "median_us": r.median_ms * 1e3, "copy_Bps": bw})
        print("copy", round(r.median_ms * 1e3, 1), f"{bw / 1e12:.3f} TB/s", flush=True)
        for name, over in VARIANTS.items():
            r = benchmark(
                lambda a, o={**BASE, **over}: softmax_forward(a, tma=o), pool, method="auto", reps=40, trials=3
            )
            sol = 2 * xs[0].numel() * 2 / bw / (r.median_ms * 1e-3)
            doc["rows"].append({"variant": name, "round": rnd, "options": {**BASE, **over},
                                "median_us": r.median_ms * 1e3, "q1_us": r.q1_ms * 1e3, "q3_us": r.q3_ms * 1e3,
                                "sol_vs_copy": sol, "max_abs_err": errs[name]})  # fmt: skip
            print(name, round(r.median_ms * 1e3, 1), round(sol, 3), f"err {errs[name]:.2e}", flush=True)
            if args.out:
                with open(args.out, "w") as fh:
                    json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
