"""Cross-version check of solkit.sol.analysis: analyse every suite problem and two huge shapes.

Counts are pure functions of shapes, so this must print identical numbers on any machine; running
it on the device (torch 2.11 + CUDA) and locally (torch 2.13 CPU) checks that tracing on meta
tensors behaves the same on both. Writes ``<out>/sol_analysis_smoke.json``.

    python3 lab/benchmarks/sol_analysis_smoke.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from solkit.sol.analysis import ShapeSpec, analyze, analyze_problem
from solkit.sol.ceilings import spec_ceilings

SUITE = Path(__file__).resolve().parents[1] / "src" / "solkit" / "problems" / "suite"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ceil = spec_ceilings("h200-sxm")
    result: dict = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "cuda_available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu",
        "problems": {},
        "errors": {},
    }
    t0 = time.perf_counter()
    for d in sorted(p for p in SUITE.iterdir() if (p / "definition.json").is_file()):
        try:
            res = analyze_problem(d, ceilings=ceil)
        except Exception as exc:  # keep going: one broken problem must not hide the rest
            result["errors"][d.name] = f"{type(exc).__name__}: {exc}"
            print("ERROR", d.name, exc, flush=True)
            continue
        result["problems"][d.name] = [
            {
                "uuid": r.uuid,
                "flops": r.analysis.flops,
                "traced_flops": r.analysis.traced_flops,
                "fused_bytes": r.analysis.fused_bytes,
                "unfused_bytes": r.analysis.unfused_bytes,
                "t_sol_ms": r.analysis.sol.t_sol_ms,
                "bound": r.analysis.sol.bound,
                "uncounted": r.analysis.uncounted,
            }
            for r in res
        ]
        print(d.name, len(res), "workloads ok", flush=True)
    result["suite_seconds"] = time.perf_counter() - t0
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t1 = time.perf_counter()
    ce = analyze(F.cross_entropy, ShapeSpec((16384, 128256), torch.bfloat16), ShapeSpec((16384,), torch.long))
    t2 = time.perf_counter()
    gemm = analyze(torch.mm, ShapeSpec((8192, 8192), torch.bfloat16), ShapeSpec((8192, 28672), torch.bfloat16))
    t3 = time.perf_counter()
    result["huge"] = {
        "cross_entropy": {"seconds": t2 - t1, "flops": ce.flops, "fused_bytes": ce.fused_bytes},
        "gemm": {"seconds": t3 - t2, "flops": gemm.flops, "fused_bytes": gemm.fused_bytes},
        "peak_rss_growth_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0,
    }
    (out / "sol_analysis_smoke.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["huge"]), "errors:", result["errors"] or "none", flush=True)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
