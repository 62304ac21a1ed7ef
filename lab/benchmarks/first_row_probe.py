"""What makes the first timed row of a shape slow? (session 7, job lead25)

The wide-softmax tables time a shape's first row right after its float64 reference checks, and that row is
sometimes 5-10 % slow (8192x4096 forward 35.4 against 33.1 us; 1024x262144 299.8 against 271.9 us in a73), the
next timing of the same call is not. Per trial and condition: a 4096x128256 forward timing (the shape before),
fresh 8192x4096 inputs, the float64 reference work of lab/benchmarks/kernels_softmax_wide.py's Reference, then one of
the conditions below, then the forward timed twice (the harness's median, graph events).

    python3 first_row_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time

import torch
import triton

from solkit.kernels.softmax.dispatch import softmax_forward
from solkit.timing import benchmark

CONDITIONS = ["none", "sleep_1s", "busy_300ms", "empty_cache", "sync_only", "none"]


def fp64_reference(x: torch.Tensor, dy: torch.Tensor) -> None:
    y64 = torch.softmax(x.double(), -1)
    d64 = dy.double()
    dx64 = y64 * (d64 - (y64 * d64).sum(-1, keepdim=True))
    float(dx64.abs().max())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--trials", type=int, default=2)
    args = p.parse_args()
    doc = {"benchmark": "first_row_probe", "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0), "command": "python3 lab/benchmarks/first_row_probe.py --out ...",
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "timing": {"method": "auto", "reps": 40, "trials": 3, "l2_flush_mode": "read"}, "rows": []}  # fmt: skip
    big = [(torch.randn(4096, 128256, device="cuda", dtype=torch.bfloat16) * 4,) for _ in range(2)]
    spare = torch.empty(64 << 20, device="cuda")
    for trial in range(args.trials):
        for cond in CONDITIONS:
            benchmark(lambda a: softmax_forward(a), big, reps=20, trials=1)
            x = [(torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16) * 4,) for _ in range(2)]
            fp64_reference(x[0][0], torch.randn_like(x[0][0]))
            if cond == "sleep_1s":
                torch.cuda.synchronize()
                time.sleep(1.0)
            elif cond == "busy_300ms":
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 0.3:
                    spare.mul_(1.0)
                    torch.cuda.synchronize()
            elif cond == "empty_cache":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            elif cond == "sync_only":
                torch.cuda.synchronize()
            us = []
            for _ in range(2):
                r = benchmark(lambda a: softmax_forward(a), x, reps=40, trials=3)
                us.append(round(r.median_ms * 1e3, 2))
            doc["rows"].append({"trial": trial, "condition": cond, "median_us": us})
            print(trial, cond, us, flush=True)
            with open(args.out, "w") as fh:
                json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
