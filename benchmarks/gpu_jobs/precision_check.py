#!/usr/bin/env python3
"""The precision policy against measurement: is T_SOL on each basis below what real kernels take?

Cases (each guarded, so one failure leaves the others' rows):

* ``upcast_linear_gelu``: the issue's reference, ``gelu(x.float() @ w.float().t() + b.float())`` on bf16
  storage, M = 512, K = 2048, N = 8192; timed as written and as the bf16 solution
  ``gelu(F.linear(x, w, b))`` (cuBLAS bf16 tensor cores), checked against the reference first;
* ``conv2d_fp32``: an fp32 3x3 convolution (ResNet's 256-channel stage, batch 32) with cuDNN's default
  ``allow_tf32=True``, the case where the ``as_written`` bound (fp32 SIMT) is above what cuDNN takes.

For each: the T_SOL of the reference on both bases (``fastest`` and ``as_written``, datasheet and calibrated
ceilings), the measured median of each implementation, and whether any measurement is below a T_SOL
(a violation: the basis is not a lower bound there).

    python3 benchmarks/gpu_jobs/precision_check.py --out $OUT/precision_check.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import traceback

import torch
import torch.nn.functional as F

from solkit.hardware.calibrate import versions
from solkit.sol.analysis import analyze
from solkit.sol.ceilings import get_ceilings
from solkit.timing import benchmark

BF16 = torch.bfloat16


def t_sols(fn, *inputs) -> dict[str, dict[str, float]]:
    out = {}
    for basis in ("spec", "calibrated"):
        ceilings = get_ceilings(None, basis)
        for precision in ("fastest", "as_written"):
            a = analyze(fn, *inputs, ceilings=ceilings, precision=precision)
            out[f"{basis}/{precision}"] = {"t_sol_ms": a.sol.t_sol_ms, "bound": a.sol.bound, "flops": dict(a.flops)}
    return out


def upcast_linear_gelu() -> dict:
    m, k, n = 512, 2048, 8192
    x = torch.randn(m, k, device="cuda", dtype=BF16)
    w = torch.randn(n, k, device="cuda", dtype=BF16) / k**0.5
    b = torch.randn(n, device="cuda", dtype=BF16)

    def reference(x, w, b):
        return F.gelu(x.float() @ w.float().t() + b.float()).to(x.dtype)

    def solution(x, w, b):
        return F.gelu(F.linear(x, w, b))

    torch.testing.assert_close(solution(x, w, b), reference(x, w, b), atol=1e-2, rtol=1e-2)
    timed = {name: benchmark(fn, [(x, w, b)]).median_ms for name, fn in (("reference", reference), ("bf16", solution))}
    return {"shape": {"M": m, "K": k, "N": n}, "measured_ms": timed, "t_sol": t_sols(reference, x, w, b)}


def conv2d_fp32() -> dict:
    x = torch.randn(32, 256, 56, 56, device="cuda")
    w = torch.randn(256, 256, 3, 3, device="cuda") / 48

    def conv(x, w):
        return F.conv2d(x, w, padding=1)

    timed = {"cudnn_tf32_default": benchmark(conv, [(x, w)]).median_ms}
    return {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "measured_ms": timed, "t_sol": t_sols(conv, x, w)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    doc = {
        "what": "T_SOL on the fastest and as_written precision bases vs measured kernels (benchmarks/gpu_jobs/"
        "precision_check.py)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "versions": versions(),
        "command": " ".join(["python3", *sys.argv]),
        "cases": {},
    }
    for name, case in (("upcast_linear_gelu", upcast_linear_gelu), ("conv2d_fp32", conv2d_fp32)):
        try:
            row = case()
            best = min(row["measured_ms"].values())
            row["violations"] = [k for k, v in row["t_sol"].items() if v["t_sol_ms"] > best]
        except Exception as exc:  # noqa: BLE001 - one failing case must not stop the others
            row = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        doc["cases"][name] = row
        print(name, json.dumps(row, indent=1)[:1500], flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
