"""``solkit profile PROBLEM_DIR...``: counters, diagnosis and advice for a problem's kernels."""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

from solkit.output import console, print_json, table


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="profile a problem's reference/solution under Nsight Compute and explain the gap to SOL",
        description=(
            "Times each target (reference, and the solution when given or present as solution.json), then runs "
            "it once under ncu (--clock-control none) and diagnoses every kernel: roof, DRAM bytes vs the "
            "fused-bytes model, occupancy, registers, tensor pipe, tier and advice. Without ncu, GPU or counter "
            "permission it reports what still works and exits 0."
        ),
    )
    p.add_argument("problem_dirs", nargs="*", metavar="PROBLEM_DIR", help="SOL-ExecBench problem directory")
    p.add_argument(
        "--from-dir",
        metavar="WORK_DIR",
        help="re-diagnose a finished profile from its saved outputs (no GPU needed) instead of running",
    )
    p.add_argument(
        "--solution",
        action="append",
        help="solution.json (matched to its problem by its 'definition' field), a .py defining run() "
        "(one PROBLEM_DIR only), or bench:BACKEND (a `solkit bench` backend: eager, compile, vendor, liger, "
        "solkit; every problem); repeatable; default: every solution*.json inside each PROBLEM_DIR",
    )
    p.add_argument(
        "--workload",
        action="append",
        help="workload uuid or prefix; repeatable (each problem takes the first that matches one of its "
        "workloads); default: the first line of workload.jsonl",
    )
    p.add_argument("--out", help="directory for profile.{md,html,json} and raw ncu output")
    p.add_argument("--no-ncu", action="store_true", help="skip the ncu pass (timing, telemetry, kernel list only)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per subprocess (default 900)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from solkit.errors import SolkitError
    from solkit.profile.runner import profile, rebuild

    if bool(args.problem_dirs) == bool(args.from_dir):
        raise SolkitError("give PROBLEM_DIR... (to profile) or --from-dir WORK_DIR (to re-diagnose), one of the two")
    if args.from_dir:
        return _show(rebuild(args.from_dir), Path(args.out or args.from_dir), args.json)
    if args.timeout <= 0:
        raise SolkitError(f"--timeout must be > 0 seconds, got {args.timeout}")
    out = (
        Path(args.out)
        if args.out
        else Path("solkit-results") / "profile" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    )
    report = profile(
        args.problem_dirs,
        solution=args.solution,
        workload=args.workload,
        out_dir=out,
        use_ncu=not args.no_ncu,
        timeout_s=args.timeout,
    )
    return _show(report, out, args.json)


def _show(report: dict, out: Path, as_json: bool) -> int:
    """Write the three reports, print the one-line notices and the table (or JSON)."""
    from solkit.profile.report import TARGET_COLUMNS, target_rows, write_reports

    paths = write_reports(report, out)
    report["report_files"] = paths
    for message in report["degraded"]:  # one line each, never wrapped, on stderr
        sys.stderr.write(f"solkit profile: degraded: {message}\n")
    for t in report["targets"]:
        warning = (t.get("telemetry") or {}).get("warning")
        if warning:
            sys.stderr.write(f"solkit profile: warning: {t['label']}: {warning}\n")
    if as_json:
        print_json(report)
    else:
        console.print(table("solkit profile", TARGET_COLUMNS, target_rows(report)))
        console.print(f"reports: {paths['markdown']}, {paths['html']}, {paths['json']}")
    failed = [t for t in report["targets"] if not t.get("ok")]
    return 1 if failed and (report.get("gpu") or {}).get("available") else 0
