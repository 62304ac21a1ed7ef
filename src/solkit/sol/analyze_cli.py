"""``solkit analyze PROBLEM_DIR``: automatic SOL analysis of every workload of a problem."""

from __future__ import annotations

import argparse
from typing import Any

from solkit.errors import SolkitError
from solkit.output import console, fmt, print_json, table, warn

#: Arch used when none is given and no GPU is present (the project's reference device).
FALLBACK_ARCH = "h200-sxm"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="derive FLOPs (by math unit), fused/unfused bytes and T_SOL of a problem's reference, per workload",
        description="Trace the reference `run` of a SOL-ExecBench problem on meta tensors (no memory is allocated), "
        "count FLOPs per math unit and bytes per op, and compute T_SOL = max(FLOPs/peak, fused bytes/bandwidth) "
        "for every workload.",
    )
    p.add_argument("problem", metavar="PROBLEM_DIR", help="problem directory (definition.json + workload.jsonl)")
    p.add_argument(
        "--arch", default=None, help="arch id (default: the present GPU, else h200-sxm); see `solkit hw list`"
    )
    p.add_argument("--basis", default="spec", choices=["spec", "calibrated"], help="datasheet or measured ceilings")
    p.add_argument(
        "--tf32",
        default="auto",
        choices=["auto", "on", "off"],
        help="charge fp32 matmuls to the TF32 tensor unit (on), the fp32 vector unit (off), or follow "
        "torch.backends.cuda.matmul.allow_tf32 (auto)",
    )
    p.add_argument(
        "--precision",
        default="fastest",
        choices=["fastest", "as-written"],
        help="charge matrix work at the fastest unit the storage dtypes and tolerance allow (a bf16 GEMM computed "
        "in fp32 at bf16, fp32 convolutions at TF32 where cuDNN allows it), or as the reference computes it",
    )
    p.add_argument(
        "--ops",
        default="all",
        choices=["all", "largest", "none"],
        help="per-op breakdown for every workload, only the largest one, or none (table output only)",
    )
    p.add_argument(
        "--all-archs",
        action="store_true",
        help="also tabulate T_SOL on every arch of the hardware database (datasheet basis; always in --json)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds the reference's analysis may take; it runs in a child process that is killed past this",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array, one object per workload")
    p.set_defaults(func=cmd_analyze)


def _ceilings(arch: str | None, basis: str):
    import torch

    from solkit.sol.ceilings import get_ceilings

    if arch is None and not torch.cuda.is_available():
        if basis == "calibrated":
            raise SolkitError("--basis calibrated needs a GPU on this machine; use --basis spec with --arch")
        warn(f"no GPU present and no --arch given: T_SOL is for {FALLBACK_ARCH} (datasheet)")
        arch = FALLBACK_ARCH
    return get_ceilings(arch, basis)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} ns"
    return f"{value * 1e3:.3f} µs" if value < 1 else f"{value:.3f} ms"


def _per_arch(results: list[Any]) -> list[dict[str, Any]]:
    """Each workload's JSON object with ``per_arch``: T_SOL and bound on every arch (datasheet basis)."""
    out = []
    for r in results:
        d = r.to_dict()
        d["per_arch"] = {
            arch: {"t_sol_ms": res.t_sol_ms, "bound": res.bound} for arch, res in r.analysis.per_arch().items()
        }
        out.append(d)
    return out


def _axes_text(axes: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in axes.items())


def cmd_analyze(args: argparse.Namespace) -> int:
    from solkit.problems.loader import load_problem
    from solkit.sol.isolated import analyze_problem_isolated

    if not args.timeout > 0:  # also false for nan
        raise SolkitError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    problem = load_problem(args.problem)  # parses files only; the reference runs in the child below
    ceilings = _ceilings(args.arch, args.basis)
    tf32 = {"auto": None, "on": True, "off": False}[args.tf32]
    from solkit.sol.precision import parse_precision

    precision = parse_precision(args.precision)
    results = analyze_problem_isolated(
        args.problem, timeout_s=args.timeout, allow_tf32=tf32, ceilings=ceilings, precision=precision
    )

    uncounted = sorted({op for r in results for op in r.analysis.uncounted})
    if uncounted:
        warn(f"{problem.name}: no FLOP rule for {', '.join(uncounted)}: their FLOPs are unknown (not counted as zero)")
    for r in results:
        for msg in r.analysis.disagreements:
            warn(f"{problem.name} {r.uuid}: {msg}; the declared value is used")
        for msg in r.analysis.notes:
            warn(f"{problem.name} {r.uuid}: {msg}")
    for note in ceilings.notes:
        warn(note)

    if args.json:
        print_json(_per_arch(results))
        return 0
    _print_tables(problem.name, results, ceilings, args.ops)
    if args.all_archs:
        _print_arch_table(problem.name, results)
    return 0


def _print_arch_table(name: str, results: list[Any]) -> None:
    per = [r.analysis.per_arch() for r in results]
    archs = list(dict.fromkeys(a for p in per for a in p))
    rows = [[arch] + [_ms(p[arch].t_sol_ms) + (" C" if p[arch].bound == "compute" else " M") if arch in p else "-"
                      for p in per] for arch in archs]  # fmt: skip
    cols = ["arch"] + [r.uuid[:13] for r in results]
    console.print(table(f"{name}: T_SOL per arch (datasheet; C = compute-bound, M = memory-bound)", cols, rows))


def _print_tables(name: str, results: list[Any], ceilings, ops_mode: str) -> None:
    rows = []
    for r in results:
        a = r.analysis
        units = ", ".join(f"{u} {fmt(float(f))}" for u, f in sorted(a.flops.items(), key=lambda kv: -kv[1]))
        rows.append(
            [
                r.uuid[:13],
                _axes_text(r.axes),
                float(a.flops_total),
                units or "-",
                float(a.fused_bytes),
                float(a.unfused_bytes),
                _ms(a.sol.t_sol_ms) if a.sol else "-",
                a.sol.bound if a.sol else "-",
                ", ".join(a.uncounted) or "-",
            ]
        )
    cols = ["workload", "axes", "FLOPs", "FLOPs by unit", "fused B", "unfused B", "T_SOL", "bound", "uncounted"]
    precision = results[0].analysis.precision.replace("_", "-") if results else "fastest"
    title = f"{name}: speed of light on {ceilings.arch} ({ceilings.basis}, precision {precision})"
    console.print(table(title, cols, rows))
    if ops_mode == "none":
        return
    chosen = results
    if ops_mode == "largest":
        chosen = [max(results, key=lambda r: (r.analysis.flops_total, r.analysis.fused_bytes))]
    for r in chosen:
        a = r.analysis
        op_rows = [
            [
                s.op,
                s.count,
                float(s.flops),
                s.unit or "-",
                float(s.bytes),
                s.note if s.counted else "UNCOUNTED: " + s.note,
            ]
            for s in a.ops
            if s.flops or s.bytes or not s.counted
        ]
        title = f"per-op breakdown, workload {r.uuid[:13]} ({_axes_text(r.axes)})"
        caption = "views move nothing and are omitted"
        console.print(table(title, ["op", "calls", "FLOPs", "unit", "bytes", "note"], op_rows, caption=caption))
