#!/usr/bin/env python3
"""Where the precision policy changes T_SOL: every problem analysed on both bases, the changes listed.

    python3 tools/precision_diff.py --kernelbench /path/to/KernelBench \\
        --out benchmarks/results/sol/2026-12-02_cpu_precision_diff.json

Problems: the suite (``src/solkit/problems/suite``), the SOL-ExecBench examples shipped in the repo
(every ``definition.json`` under ``tests/`` and ``benchmarks/`` whose reference is not a deliberate cheat),
and, with ``--kernelbench`` (KernelBench's ``KernelBench/`` folder), levels 1-3 imported on the fly.
Each workload is traced once on meta tensors (CPU, no GPU) and counted on the ``fastest`` and the
``as_written`` basis (:mod:`solkit.sol.precision`) with PyTorch's default switches (matmul TF32 off,
cuDNN TF32 on); T_SOL is on the h200-sxm datasheet. A row is written for each workload whose T_SOL
changes: old/new, the units of its FLOPs on each basis, and whether the bound flips.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCH = "h200-sxm"
#: Example problems that are deliberately broken references (the harness's cheat fixtures).
SKIP = ("tests/harness/cheats",)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout


def problem_dirs() -> list[tuple[str, Path]]:
    suite = sorted((ROOT / "src/solkit/problems/suite").glob("*/definition.json"))
    examples = sorted(p for base in ("tests", "benchmarks") for p in (ROOT / base).rglob("definition.json"))
    examples = [p for p in examples if not any(str(p.relative_to(ROOT)).startswith(s) for s in SKIP)]
    return [("suite", p.parent) for p in suite] + [("example", p.parent) for p in examples]


def _units(a) -> dict[str, int]:
    return {u: int(f) for u, f in sorted(a.flops.items()) if f}


def compare(source: str, name: str, results, ceilings) -> tuple[list[dict], int]:
    """Rows for the workloads of one problem whose T_SOL differs between the bases; and how many were compared."""
    rows = []
    for r in results:
        new = r.analysis
        old = new.with_precision("as_written")
        t_new, t_old = new.t_sol(ceilings), old.t_sol(ceilings)
        assert new.fused_bytes == old.fused_bytes, f"{name}: bytes depend on the basis"
        if abs(t_new.t_sol_s - t_old.t_sol_s) <= 1e-9 * t_old.t_sol_s:
            continue
        rows.append(
            {
                "source": source,
                "problem": name,
                "workload": r.uuid,
                "axes": r.axes,
                "as_written_t_sol_ms": t_old.t_sol_ms,
                "fastest_t_sol_ms": t_new.t_sol_ms,
                "ratio": t_old.t_sol_s / t_new.t_sol_s,
                "as_written_flops": _units(old),
                "fastest_flops": _units(new),
                "as_written_bound": t_old.bound,
                "fastest_bound": t_new.bound,
                "bound_flip": t_old.bound != t_new.bound,
                "fused_bytes": new.fused_bytes,
                "declared": bool(new.declared),
            }
        )
    return rows, len(results)


def analyse_dir(source: str, path: Path, ceilings, timeout_s: int) -> tuple[list[dict], int, str | None]:
    from solkit.problems.loader import load_problem
    from solkit.sol.analysis import analyze_problem

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        problem = load_problem(path)
        rows, n = compare(source, problem.name, analyze_problem(problem), ceilings)
        return rows, n, None
    except Timeout:
        return [], 0, f"timeout after {timeout_s} s"
    except Exception as exc:  # noqa: BLE001 - every failure is a line of the report
        return [], 0, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    finally:
        signal.alarm(0)


def kernelbench_dirs(kb: Path, work: Path) -> tuple[list[Path], list[dict]]:
    from solkit.problems.kernelbench import find_files, import_file

    dirs, errors = [], []
    for level in ("level1", "level2", "level3"):
        for f in find_files(kb / level):
            imp = import_file(f, work)
            if imp.error is None:
                dirs.append(imp.out)
            else:
                errors.append({"source": "kernelbench", "problem": f"{level}/{f.name}", "error": imp.error[-300:]})
    return dirs, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", type=Path, default=None, help="KernelBench's KernelBench/ folder (levels 1-3)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per problem")
    args = ap.parse_args()

    import torch

    from solkit.sol.ceilings import spec_ceilings

    ceilings = spec_ceilings(ARCH)
    todo = problem_dirs()
    errors: list[dict] = []
    if args.kernelbench is not None:
        dirs, errors = kernelbench_dirs(args.kernelbench, Path(tempfile.mkdtemp(prefix="solkit_kb_")))
        todo += [("kernelbench", d) for d in dirs]
    rows: list[dict] = []
    counts: dict[str, dict[str, int]] = {}
    t0 = time.perf_counter()
    for source, path in todo:
        got, n, err = analyse_dir(source, path, ceilings, args.timeout)
        c = counts.setdefault(source, {"problems": 0, "workloads": 0, "problems_changed": 0, "errors": 0})
        c["problems"] += 1
        c["workloads"] += n
        c["problems_changed"] += bool(got)
        rows += got
        if err is not None:
            c["errors"] += 1
            errors.append({"source": source, "problem": str(path.relative_to(path.parents[1])), "error": err})
        print(f"{source} {path.name}: {err or f'{len(got)} of {n} workloads change'}", flush=True)
    doc = {
        "what": "T_SOL on the 'fastest' vs the 'as_written' precision basis, for every problem solkit ships "
        "and KernelBench levels 1-3 (meta tensors on a CPU, no GPU)",
        "date": datetime.date.today().isoformat(),
        "device": f"cpu ({platform.machine()}); T_SOL on the {ARCH} datasheet",
        "script": "tools/precision_diff.py",
        "command": " ".join(["python3", *sys.argv]),
        "commit": _git(["rev-parse", "--short", "HEAD"]),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "kernelbench_commit": _kb_commit(args.kernelbench),
        "switches": {"matmul_allow_tf32": False, "cudnn_allow_tf32": True, "note": "PyTorch's defaults"},
        "seconds": round(time.perf_counter() - t0, 1),
        "counts": counts,
        "summary": _summary(rows),
        "changed": rows,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"counts": counts, "summary": doc["summary"]}, indent=1))


def _summary(rows: list[dict]) -> dict[str, dict]:
    out = {}
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        out[source] = {
            "workloads_changed": len(mine),
            "problems_changed": len({r["problem"] for r in mine}),
            "median_ratio": round(statistics.median(r["ratio"] for r in mine), 3),
            "max_ratio": round(max(r["ratio"] for r in mine), 3),
            "bound_flips": sum(r["bound_flip"] for r in mine),
            "compute_to_memory": sum(r["as_written_bound"] == "compute" and r["bound_flip"] for r in mine),
        }
    return out


def _git(cmd: list[str]) -> str:
    out = subprocess.run(["git", *cmd], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or "unknown"


def _kb_commit(path: Path | None) -> str | None:
    if path is None:
        return None
    marker = path / "COMMIT"
    return marker.read_text().strip() if marker.exists() else "unknown"


if __name__ == "__main__":
    main()
