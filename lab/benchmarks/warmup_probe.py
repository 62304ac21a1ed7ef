"""Does a time-based warm-up remove the 'first timed row of a shape is slow' artefact?

Sessions 5-6 timed the 8192x4096 bf16 softmax forward at 35.2-35.5 µs when it was the first row timed after a
shape's inputs and fp64 checks, and 33.0-33.4 µs later in the same run. This probe repeats that sequence
(fresh inputs, an fp64 reference check, then the timed forward twice in a row) with the harness's warm-up of
``--warmup-ms`` 0 (the old 5-call warm-up only), 50 and 200 ms, in a rotating order, and records the SM clock
(NVML) before each timing.

    python3 warmup_probe.py --out probe.json
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

SHAPES = [(8192, 4096), (1024, 262144)]


def sm_clock() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - the clock is context, not a result
        return None


def sequence(doc: dict, args) -> int:
    """Per trial: a 1024x262144 timing (the shape before), then 8192x4096 timed four times in a row, recording
    the input and output addresses each timing used (the output is allocated inside the captured graph)."""
    for trial in range(args.trials):
        big = [(torch.randn(1024, 262144, device="cuda", dtype=torch.bfloat16) * 4,) for _ in range(2)]
        benchmark(lambda a: softmax_forward(a), big, method="auto", reps=40, trials=3, warmup=3)
        del big
        if trial == 2:
            torch.cuda.empty_cache()
        x = [(torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16) * 4,) for _ in range(2)]
        for k in range(4):
            outs: list[int] = []

            def fn(a, outs=outs):
                y = softmax_forward(a)
                outs.append(y.data_ptr())
                return y

            r = benchmark(fn, x, method="auto", reps=40, trials=3, warmup=3)
            row = {"trial": trial, "timing": k, "median_us": r.median_ms * 1e3, "q1_us": r.q1_ms * 1e3,
                   "q3_us": r.q3_ms * 1e3, "x_ptrs": [hex(a[0].data_ptr()) for a in x],
                   "out_ptrs_last": sorted({hex(p) for p in outs[-4:]}), "empty_cache_before": trial == 2}  # fmt: skip
            doc["rows"].append(row)
            print(trial, k, round(row["median_us"], 1), row["x_ptrs"], row["out_ptrs_last"], flush=True)
            with open(args.out, "w") as fh:
                json.dump(doc, fh, indent=1)
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--sequence", action="store_true", help="after a 1024x262144 row, time 8192x4096 four times")
    args = p.parse_args()
    doc = {"benchmark": "warmup_probe", "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0), "command": "python3 lab/benchmarks/warmup_probe.py --out ...",
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "timing": {"method": "auto", "reps": 40, "trials": 3, "warmup": 3, "l2_flush_mode": "read"},
           "rows": []}  # fmt: skip
    if args.sequence:
        return sequence(doc, args)
    orders = [(0.0, 50.0, 200.0), (50.0, 200.0, 0.0), (200.0, 0.0, 50.0)]
    for trial in range(args.trials):
        for shape in SHAPES:
            for wms in orders[trial % 3]:
                x = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 4 for _ in range(2)]
                ref = torch.softmax(x[0].double(), -1)
                out = softmax_forward(x[0])
                err = (out.double() - ref).abs().max().item()
                del ref
                time.sleep(0.5)  # the pause between a shape's checks and its first timed row
                samples = []
                for _ in range(2):
                    clk = sm_clock()
                    r = benchmark(lambda a: softmax_forward(a), [(a,) for a in x], method="auto", reps=40, trials=3,
                                  warmup=3, l2_flush_mode="read", warmup_ms=wms)  # fmt: skip
                    samples.append({"median_us": r.median_ms * 1e3, "q1_us": r.q1_ms * 1e3, "q3_us": r.q3_ms * 1e3,
                                    "method": r.method, "sm_clock_mhz_before": clk})  # fmt: skip
                row = {"trial": trial, "shape": list(shape), "warmup_ms": wms, "max_abs_err": err, "samples": samples}
                doc["rows"].append(row)
                print(trial, shape, wms, [round(s["median_us"], 1) for s in samples], [s["sm_clock_mhz_before"]
                      for s in samples], flush=True)  # fmt: skip
                with open(args.out, "w") as fh:
                    json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
