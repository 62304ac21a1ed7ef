#!/usr/bin/env python3
"""Run one benchmark plan and write its results (one JSON per run).

    python3 benchmarks/run.py benchmarks/plans/norms.yaml                  # GPU: the plan's shapes
    python3 benchmarks/run.py benchmarks/plans/norms.yaml --size s --out /tmp/n.json   # tiny shapes
    python3 benchmarks/run.py PLAN --impls solkit,torch --json             # the JSON on stdout

On a machine without a GPU, Triton runs through its interpreter, and the plan's small shapes and ``cpu:``
dtypes are used. Results go to ``benchmarks/results/<topic>/<date>_<device>.json`` unless ``--out`` says
otherwise. Exit status: 0 when every solkit row is correct, 1 when one is wrong or failed, 2 for a bad plan
or command line (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import meta  # noqa: E402
from suite.measure import run_one  # noqa: E402
from suite.plan import PlanError, load  # noqa: E402
from suite.registry import IMPLS  # noqa: E402


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        sys.stderr.write(f"run.py: {message}\n")
        raise SystemExit(2)


def parse(argv: list[str]) -> argparse.Namespace:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("plan", help="a plan file (benchmarks/plans/*.yaml)")
    p.add_argument("--out", help="the result file (.json) or a folder; default benchmarks/results/<topic>/")
    p.add_argument("--json", action="store_true", help="print the result JSON on stdout instead of a table")
    p.add_argument("--size", choices=("s", "l"), help="s: the cases' small shapes (default on a CPU); l: the plan's")
    p.add_argument("--impls", help=f"only these implementations (comma-separated: {', '.join(IMPLS)})")
    p.add_argument("--basis", choices=("calibrated", "spec", "none"), help="SOL ceilings (GPU default calibrated)")
    return p.parse_args(argv)


def ceilings_for(basis: str | None, device: torch.device):
    basis = basis or ("calibrated" if device.type == "cuda" else "none")
    if basis == "none":
        return None
    from solkit.sol.ceilings import get_ceilings

    return get_ceilings(basis=basis)


def table(doc: dict) -> str:
    lines = [f"{doc['plan']['topic']} on {doc['device']['name']}:"]
    for row in doc["rows"]:
        case = f"{row['op']} {'x'.join(map(str, row['shape']))} {row['dtype']} {row['direction']}"
        for r in row["results"]:
            if r["status"] == "ok":
                s = f"{r['median_ms']:.4f} ms (iqr {r['iqr_ms']:.4f}) {r['tb_s']:.3f} TB/s"
                s += f" SOL {r['sol']:.3f}" if "sol" in r else ""
            else:
                s = f"{r['status']}: {r['reason']}"
            lines.append(f"  {case:<44} {r['impl']:<8} {s}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        plan = load(args.plan)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        small = args.size == "s" or (args.size is None and device.type != "cuda")
        cases = plan.cases(small=small, cpu=device.type != "cuda")
        only = args.impls.split(",") if args.impls else None
        for name in only or ():
            if name not in IMPLS:
                raise PlanError(f"--impls: unknown implementation {name!r}; allowed: {', '.join(IMPLS)}")
    except PlanError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    started = meta.now()
    dev = meta.device_record(device)
    doc = {"schema": "solkit-benchmark-run/1", "date": started.isoformat(timespec="seconds"), "device": dev,
           "versions": meta.versions(), "commit": meta.git_commit(), "command": " ".join(["benchmarks/run.py", *argv]),
           "plan": {"path": str(args.plan), "topic": plan.topic, "size": "s" if small else "l", **plan.data},
           "timing": {"harness": "solkit.timing.benchmark", **plan.timing(device.type != "cuda")}}  # fmt: skip
    ceilings = ceilings_for(args.basis, device)
    doc["ceilings"] = ceilings.to_dict() if ceilings is not None else None
    doc["rows"] = []
    for case in cases:
        results = [
            run_one(case, impl, device, doc["timing"], ceilings) for impl in case.impls if not only or impl in only
        ]
        doc["rows"].append({"op": case.op, "name": case.name, "shape": list(case.shape), "dtype": case.dtype,
                            "direction": case.direction, "results": results})  # fmt: skip
    doc["wall_s"] = round((meta.now() - started).total_seconds(), 1)
    path = meta.out_path(plan.topic, meta.device_slug(dev), started, small, args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1) if args.json else table(doc) + f"\nwrote {path}")
    bad = [
        r for row in doc["rows"] for r in row["results"] if r["impl"] == "solkit" and r["status"] in ("wrong", "error")
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
