"""KernelBench coverage of `solkit import kernelbench` + `solkit analyze` on this CPU (meta tensors, no GPU).

    python3 lab/benchmarks/kernelbench_coverage.py KERNELBENCH_DIR --work /tmp/kb_problems \\
        --out benchmarks/results/kernelbench/2026-12-02_cpu_coverage.json

KERNELBENCH_DIR holds level1/ level2/ level3/ (KernelBench's ``KernelBench/`` folder). Each file is imported,
then analysed with a per-problem time limit (SIGALRM); T_SOL is on the datasheet h200-sxm with fp32
matmuls on the fp32 vector unit (``--tf32 off``: KernelBench's references are fp32).
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
import time
from pathlib import Path

LEVELS = ("level1", "level2", "level3")


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def one(f: Path, level: str, work: Path, ceilings, timeout_s: int) -> dict:
    """Import then analyse one level file, both within ``timeout_s``."""
    from solkit.problems.kernelbench import import_file
    from solkit.problems.loader import load_problem
    from solkit.sol.analysis import analyze_problem

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    t0 = time.perf_counter()
    row = {"level": level, "file": f.name, "problem": "", "imported": False}
    try:
        imp = import_file(f, work)
        row.update(problem=imp.name, imported=imp.error is None, import_seconds=round(time.perf_counter() - t0, 3))
        if imp.error is not None:
            return {**row, "analysed": False, "error": imp.error.replace(str(f), f"{level}/{f.name}")}
        t0 = time.perf_counter()
        [r] = analyze_problem(load_problem(imp.out), allow_tf32=False, ceilings=ceilings)
    except Timeout:
        return {**row, "analysed": False, "error": f"timeout after {timeout_s} s"}
    except Exception as exc:  # noqa: BLE001 - every failure is a row of the report
        return {**row, "analysed": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
    finally:
        signal.alarm(0)
    a = r.analysis
    return {
        **row,
        "analysed": True,
        "seconds": round(time.perf_counter() - t0, 3),
        "flops": dict(a.flops),
        "flops_total": a.flops_total,
        "fused_bytes": a.fused_bytes,
        "unfused_bytes": a.unfused_bytes,
        "t_sol_ms": a.sol.t_sol_ms,
        "bound": a.sol.bound,
        "uncounted": list(a.uncounted),
        "notes": list(a.notes),
        "error": None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()

    from solkit.problems.kernelbench import find_files
    from solkit.sol.ceilings import get_ceilings

    ceilings = get_ceilings("h200-sxm", "spec")
    rows, totals = [], {}
    for level in LEVELS:
        for f in find_files(args.kernelbench / level):
            row = one(f, level, args.work, ceilings, args.timeout)
            rows.append(row)
            print(f"{level}/{f.name}: {'ok' if row['analysed'] else row['error']}", flush=True)
        lv = [r for r in rows if r["level"] == level]
        totals[level] = _totals(lv)
    totals["all"] = _totals(rows)
    doc = {
        "what": "solkit import kernelbench + solkit analyze over KernelBench levels 1-3, on a CPU (meta tensors)",
        "date": datetime.date.today().isoformat(),
        "device": "cpu (2 cores); T_SOL on h200-sxm datasheet, fp32 matmuls on fp32_vector (--tf32 off)",
        "script": "lab/benchmarks/kernelbench_coverage.py",
        "command": " ".join(["python3", *sys.argv]),
        "kernelbench_commit": _commit(args.kernelbench),
        "commit": _solkit_commit(),
        "timeout_s": args.timeout,
        "totals": totals,
        "problems": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(totals, indent=1))


def _totals(rows: list[dict]) -> dict:
    clean = [r for r in rows if r["analysed"] and not r["uncounted"]]
    return {
        "files": len(rows),
        "imported": sum(r["imported"] for r in rows),
        "analysed": sum(r["analysed"] for r in rows),
        "analysed_with_nothing_uncounted": len(clean),
        "fraction_clean": round(len(clean) / len(rows), 4) if rows else None,
    }


def _solkit_commit() -> str:
    import subprocess

    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    )
    return out.stdout.strip() or "unknown"


def _commit(path: Path) -> str:
    marker = path / "COMMIT"
    return marker.read_text().strip() if marker.exists() else "unknown"


if __name__ == "__main__":
    main()
