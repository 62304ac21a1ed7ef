"""``solkit eval`` and ``solkit eval-suite``: evaluate SOL-ExecBench problems.

* ``solkit eval PROBLEM_DIR [--solution FILE] [--device cuda:N|cpu] [--json] [-o traces.jsonl]`` —
  without ``--solution`` PROBLEM_DIR/solution.json, else the reference against itself (a sanity run); SOL-ExecBench's
  own argv works too (``--definition/--workload/--config``, :mod:`solkit.harness.compat`), ``--json`` prints JSONL;
* ``solkit eval-suite ROOT [--json] [-o DIR]`` — every problem directory under ROOT (a directory
  with ``definition.json``), each solution ``solution*.json`` found there (or the reference), one
  traces file per problem plus ``summary.json``; resumable (finished problems are skipped unless
  ``--rerun``); failures are recorded and the suite goes on.

Exit code: 0 only when every trace PASSED; 2 for bad input (one line, no traceback).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.harness import compat
from solkit.harness.forkserver import ForkServer
from solkit.harness.spawn import device_guess
from solkit.output import console, print_json, table, warn

# The evaluation modules (torch) are imported inside the commands, after the fork server has been spawned:
# its imports and this process's then run at the same time.


def _add_eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda:0 if present, else cpu)")
    p.add_argument("--json", action="store_true", help="JSON on stdout (eval: JSONL traces; eval-suite: the summary)")
    p.add_argument("--seed", type=int, default=200)
    p.add_argument("--trials", type=int, default=3, help="correctness trials, fresh inputs each (default 3)")
    p.add_argument("--reps", type=int, default=50, help="timed repetitions per timing trial (default 50)")
    p.add_argument("--timing-trials", type=int, default=3, help="timing trials (default 3)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--method",
        choices=["auto", "graph_events", "events", "graph", "kernel"],
        default="auto",
        help="GPU timing: auto = kernel when the CUDA profiler works, else graph_events below 100 µs, "
        "else events; kernel = the kernels' own GPU span per call from the CUDA profiler (Nsight "
        "Compute's gpu__time_duration); graph_events = per-call events inside a CUDA graph",
    )
    p.add_argument("--cooldown-ms", type=float, default=0.0,
                   help="GPU idle before every timed call, so each starts like an isolated launch under Nsight "
                        "Compute (default 0)")  # fmt: skip
    p.add_argument("--matched-ratio", type=float, default=None,
                   help="fraction of elements that must match (default: 1.0 unless the workload sets it)")  # fmt: skip
    p.add_argument("--no-precision-check", action="store_true", help="skip the fp64 precision-downgrade check")
    p.add_argument("--no-reference-timing", action="store_true", help="do not time the reference")
    p.add_argument("--compile-timeout", type=float, default=120.0, help="seconds for import/build (default 120)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per workload (default 300)")
    p.add_argument("--workload", action="append", default=None, metavar="UUID",
                   help="only this workload (repeatable); eval: also a workload.jsonl, as sol-execbench")  # fmt: skip
    p.add_argument("--max-workloads", type=int, default=None)
    p.add_argument("--cpu-threads", type=int, default=None, help="torch threads in the worker on the CPU")
    p.add_argument("--cpu-timing-budget", type=float, default=5.0, help="seconds of wall-clock timing per call on CPU")
    box = p.add_mutually_exclusive_group()
    box.add_argument(
        "--require-sandbox",
        action="store_true",
        help="refuse to run unless the candidate can be contained (namespaces and Landlock)",
    )
    box.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the candidate uncontained (only for your own trusted code; see docs/judge.md)",
    )
    p.add_argument(
        "--fixed-seed",
        action="store_true",
        help="use --seed as given, without this run's secret salt (reproducible inputs, predictable too)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a solution (or the reference) on a SOL-ExecBench problem")
    p.add_argument("problem_dir", metavar="PROBLEM_DIR", nargs="?", help="definition.json + workload.jsonl inside")
    p.add_argument("--solution", default=None, metavar="FILE",
                   help="solution.json or a .py defining run (default: PROBLEM_DIR/solution.json, else the reference "
                        "itself)")  # fmt: skip
    p.add_argument("-o", "--output", default=None, metavar="traces.jsonl", help="write the traces as JSONL")
    _add_eval_options(p)
    compat.add_arguments(p)  # SOL-ExecBench's own flags (docs/sol-execbench.md)
    p.set_defaults(func=cmd_eval)
    s = sub.add_parser("eval-suite", help="evaluate every problem under a directory (resumable)")
    s.add_argument("root", metavar="ROOT")
    s.add_argument("-o", "--output", default=None, metavar="DIR", help="traces directory (default ROOT/solkit-traces)")
    s.add_argument("--solution-glob", default="solution*.json", help="solutions to evaluate in each problem dir")
    s.add_argument("--reference", action="store_true", help="evaluate the reference only, ignoring solutions")
    s.add_argument("--rerun", action="store_true", help="re-evaluate problems that already have traces")
    s.add_argument("--devices", default=None, metavar="all|0,1,3|cpu,cpu|cpu:N",
                   help="spread the (problem, solution) evaluations over these devices, one worker each")  # fmt: skip
    s.add_argument("--lookahead", type=int, default=None, metavar="N",
                   help="serial suite: start the candidate processes of the next N evaluations ahead, never beside a "
                        "call (default: 2 to 4 on 8 or more cores, else 0: off; docs/sol-execbench.md)")  # fmt: skip
    s.add_argument(
        "--ray",
        default=None,
        metavar="auto|local|ADDRESS",
        help="spread them over a Ray cluster, one actor per GPU (needs solkit[ray]; docs/scale.md)",
    )
    _add_eval_options(s)
    s.set_defaults(func=cmd_eval_suite)


def _positive(flag: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SolkitError(f"{flag} {value}: must be a positive number of seconds")


def _options(args: argparse.Namespace):
    from solkit.harness.evaluate import EvalOptions

    _positive("--timeout", args.timeout)
    _positive("--compile-timeout", args.compile_timeout)
    _positive("--cpu-timing-budget", args.cpu_timing_budget)
    if args.max_workloads is not None and args.max_workloads < 1:
        raise SolkitError(f"--max-workloads {args.max_workloads}: must be at least 1")
    if not math.isfinite(args.cooldown_ms) or args.cooldown_ms < 0:
        raise SolkitError(f"--cooldown-ms {args.cooldown_ms}: must be a finite number ≥ 0")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        raise SolkitError(f"--cpu-threads {args.cpu_threads}: must be at least 1")
    if args.trials < 3:
        raise SolkitError(f"--trials {args.trials}: at least 3 correctness trials (fresh inputs each) are required")
    if args.reps < 1 or args.timing_trials < 1 or args.warmup < 0:
        raise SolkitError("--reps and --timing-trials must be at least 1, --warmup at least 0")
    if args.matched_ratio is not None and not 0.0 <= args.matched_ratio <= 1.0:
        raise SolkitError(f"--matched-ratio {args.matched_ratio}: must be between 0 and 1")
    return EvalOptions(
        device=args.device,
        seed=args.seed,
        trials=args.trials,
        reps=args.reps,
        timing_trials=args.timing_trials,
        warmup=args.warmup,
        method=args.method,
        cooldown_ms=args.cooldown_ms,
        matched_ratio=args.matched_ratio,
        precision_check=not args.no_precision_check,
        benchmark_reference=not args.no_reference_timing,
        compile_timeout=args.compile_timeout,
        run_timeout=args.timeout,
        workloads=args.workload,
        max_workloads=args.max_workloads,
        cpu_threads=args.cpu_threads,
        cpu_timing_budget_s=args.cpu_timing_budget,
        sandbox="require" if args.require_sandbox else ("off" if args.no_sandbox else "auto"),
        secret_seed=not args.fixed_seed,
    )


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0][:160] if (text or "").strip() else ""


def _sol_cell(p) -> str | None:
    if p is None or p.sol_fraction is None:
        return None
    return f"{p.sol_fraction:.1%}" + (" (<T_SOL!)" if p.sol_violation else "")


def _rows(traces) -> list[list[Any]]:
    rows = []
    for t in traces:
        e = t.evaluation
        p, c = e.performance, e.correctness
        rows.append([
            t.workload.uuid[:13],
            ",".join(f"{k}={v}" for k, v in t.workload.axes.items()),
            e.status.value,
            p.latency_ms if p else None,
            p.reference_latency_ms if p else None,
            p.speedup_factor if p else None,
            p.t_sol_ms if p else None,
            _sol_cell(p),
            c.max_absolute_error if c else None,
            e.environment.timing_method,
            _first_line(e.log),
        ])  # fmt: skip
    return rows


COLUMNS = ["workload", "axes", "status", "ms", "ref ms", "speedup", "T_SOL ms", "SOL", "max |Δ|", "timing", "log"]


def _check_output_file(flag: str, value: str | None) -> None:
    if value is None:
        return
    out = Path(value)
    if out.is_dir():
        raise SolkitError(f"{flag} {value}: is a directory; give a file name (traces.jsonl)")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise SolkitError(f"{flag} {value}: {parent} is not a writable directory")


def cmd_eval(args: argparse.Namespace) -> int:
    """``solkit eval``: SOL-ExecBench's argv too (solkit.harness.compat); traces as a table, or JSONL with --json."""
    verbose = getattr(args, "eval_verbose", 0)
    if verbose:
        logging.getLogger("solkit").setLevel(logging.INFO)
    spec = compat.resolve(args)
    _check_output_file("-o/--output", args.output)
    ForkServer.prestart(device_guess(args.device))  # the reference's process starts while this one imports torch
    from solkit.harness.evaluate import evaluate, summarize, traces_to_jsonl

    args.workload = spec.uuids
    options = _options(args)
    if args.keep_staging:
        options.work_dir = tempfile.mkdtemp(prefix="solkit_eval_")
    options.extra["launch_s"] = compat.process_age_s()  # the command's own start-up, before evaluate() runs
    for note in spec.notes:
        logging.getLogger("solkit").info("%s", note)
    traces = evaluate(spec.definition, spec.solution, options, spec.workloads)
    if args.output:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(traces_to_jsonl(traces))
    summary = summarize(traces)
    if args.json:
        sys.stdout.write(traces_to_jsonl(traces))  # one trace per line, as sol-execbench --json
    else:
        title = f"{traces[0].definition} · {traces[0].solution} · {traces[0].evaluation.environment.hardware}"
        console.print(table(title, COLUMNS, _rows(traces)))
        counts = ", ".join(f"{n} {s}" for s, n in summary["by_status"].items())
        console.print(f"{counts} of {summary['traces']} workloads" + (f" → {args.output}" if args.output else ""))
        console.print(compat.phase_summary(traces))
        for t in traces:
            for key in ("warning", "timing_warning"):
                note = (t.evaluation.solkit or {}).get(key)
                if note:
                    warn(f"{t.workload.uuid}: {note}")
        for note in dict.fromkeys((t.evaluation.solkit or {}).get(k) for t in traces for k in ("triton", "definition")):
            if note:
                warn(note)  # one note for the whole run
    if verbose:
        for t in traces:
            if t.evaluation.status.value != "PASSED" and t.evaluation.log:
                sys.stderr.write(f"--- {t.workload.uuid} {t.evaluation.status.value}\n{t.evaluation.log.rstrip()}\n")
    if options.work_dir:
        sys.stderr.write(f"solkit: work directory kept: {options.work_dir}\n")
    args.exit_now = True  # everything is written: the command line skips the interpreter's teardown of torch
    return 0 if summary["all_passed"] else 1


def _problem_dirs(root: Path) -> list[Path]:
    if (root / "definition.json").is_file():
        return [root]
    return sorted(p.parent for p in root.rglob("definition.json"))


def _trace_file(out_dir: Path, root: Path, problem: Path) -> Path:
    """One file per problem; ``x/y`` and ``x__y`` never share one (a name with ``__`` of its own gets a hash)."""
    rel = problem.relative_to(root).as_posix() if problem != root else problem.name
    name = rel.replace("/", "__")
    if any("__" in part for part in rel.split("/")):
        name += "-" + hashlib.sha256(rel.encode()).hexdigest()[:10]
    return out_dir / (name + ".traces.jsonl")


def _solutions(problem: Path, pattern: str) -> list[Path]:
    """The solutions matching ``pattern`` inside the problem directory (never outside it)."""
    inside = problem.resolve()
    found = []
    for s in sorted(problem.glob(pattern)):
        r = s.resolve()
        if s.is_file() and (r == inside or inside in r.parents):
            found.append(s)
    return found


def _check_glob(pattern: str) -> None:
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise SolkitError(
            f"--solution-glob {pattern!r}: must stay inside each problem directory (no '..', not absolute)"
        )


def cmd_eval_suite(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    root = Path(args.root)
    if not root.is_dir():
        raise SolkitError(f"{root}: not a directory")
    problems = _problem_dirs(root)
    if not problems:
        raise SolkitError(f"{root}: no problem directories (none contains definition.json)")
    if not (args.devices or args.ray):
        ForkServer.prestart(device_guess(args.device))  # one fork server for every problem's reference process
    from solkit.harness.suite_shards import run_pooled

    options = _options(args)
    _check_glob(args.solution_glob)
    out_dir = Path(args.output) if args.output else root / "solkit-traces"
    if out_dir.exists() and not out_dir.is_dir():
        raise SolkitError(f"-o/--output {out_dir}: is a file; eval-suite writes a directory of traces")
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = _previous_summary(out_dir)
    summary: dict[str, Any] = {"root": str(root), "problems": {}, "started": time.time()}
    bar_console = type(console)(stderr=True) if args.json else None  # keep stdout pure JSON
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    pool = _pool(args)
    order, todo, serial = [], [], []
    with Progress(*columns, console=bar_console) as progress:
        task = progress.add_task("problems", total=len(problems))
        for problem in problems:
            key = problem.relative_to(root).as_posix() if problem != root else problem.name
            order.append(key)
            dest = _trace_file(out_dir, root, problem)
            solutions = [] if args.reference else _solutions(problem, args.solution_glob)
            entry: dict[str, Any] = {
                "traces_file": str(dest),
                "solutions": [s.name for s in solutions] or ["reference"],
            }
            summary["problems"][key] = entry
            if dest.is_file() and not args.rerun:
                entry.update(_summarize_file(dest))
                entry["resumed"] = True
                earlier = (previous.get(key) or {}).get("errors")
                if earlier:  # the first run's errors are not in the traces file: keep them, and the failure
                    entry["errors"], entry["all_passed"] = earlier, False
                progress.advance(task)
            else:
                names = [s.relative_to(problem).as_posix() for s in solutions]
                (todo if pool is not None else serial).append((key, problem, names))
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        ran = _run_serial(serial, options, summary, out_dir, progress, task, args)
        if todo:
            progress.update(task, description=f"{len(todo)} problems on the {pool.kind} pool")
            with pool:
                for key, traces, errors in run_pooled(pool, todo, options):
                    _record(summary["problems"][key], Path(summary["problems"][key]["traces_file"]), traces, errors)
                    ran += traces
                    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
                    progress.advance(task)
    if ran:
        from solkit.harness.phases import suite_time

        summary["time_s"] = suite_time(ran, compat.process_age_s())
    all_passed = all(bool(summary["problems"][k].get("all_passed")) for k in order)
    summary["all_passed"] = all_passed
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if args.json:
        print_json(summary)
    else:
        rows = [[k, v.get("traces", 0), json.dumps(v.get("by_status", {})), "yes" if v.get("resumed") else "",
                 "; ".join(v.get("errors", []))[:120]] for k, v in summary["problems"].items()]  # fmt: skip
        console.print(table(f"eval-suite {root}", ["problem", "traces", "statuses", "resumed", "errors"], rows))
        if summary.get("time_s"):
            console.print(_time_line(summary["time_s"]))
        console.print(f"traces and summary.json in {out_dir}")
    args.exit_now = True  # as eval
    return 0 if all_passed else 1


def _run_serial(serial: list, options, summary: dict, out_dir: Path, progress, task, args) -> list:
    """The serial suite, in order, the candidates of the next evaluations started ahead (:mod:`.lookahead`); returns
    every trace it made."""
    from solkit.harness.lookahead import Lookahead, auto_depth
    from solkit.harness.suite_shards import evaluate_problem

    depth = auto_depth() if args.lookahead is None else args.lookahead
    items = [(problem, problem / n if n else None) for _, problem, names in serial for n in (names or [None])]
    lookahead = Lookahead(items, options, 0 if options.work_dir else depth)
    summary["lookahead"] = lookahead.depth
    ran = []
    try:
        for key, problem, names in serial:
            progress.update(task, description=key[-50:])
            entry = summary["problems"][key]
            traces, errors = evaluate_problem(problem, names, options, lookahead)
            _record(entry, Path(entry["traces_file"]), traces, errors)
            ran += traces
            (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            progress.advance(task)
    finally:
        lookahead.close()
    return ran


def _time_line(t: dict[str, Any]) -> str:
    phases = ", ".join(f"{k} {v:.2f}" for k, v in t["phases_s"].items() if v)
    over = t.get("overhead_per_workload_wall_s")
    return (
        f"{t['workloads']} workloads in {t.get('wall_s', 0):.1f} s; seconds per phase: {phases}; "
        f"(wall - timing - reference_timing) per workload {over if over is not None else '-'}"
    )


def _pool(args: argparse.Namespace):
    """The pool of --devices / --ray, or None for a serial run on --device."""
    if not (args.devices or args.ray):
        return None
    if args.device not in ("auto", None):
        raise SolkitError("--device and --devices/--ray: give one (--devices names every device to use)")
    from solkit.scale import open_pool

    return open_pool(args.devices, args.ray)


def _record(entry: dict[str, Any], dest: Path, traces, errors: list[str]) -> None:
    """One problem's traces file (written atomically) and its summary entry."""
    from solkit.harness.evaluate import summarize, traces_to_jsonl

    tmp = dest.with_suffix(".tmp")
    tmp.write_text(traces_to_jsonl(traces))
    tmp.replace(dest)
    entry.update(summarize(traces))
    if errors:
        entry["errors"] = errors
        entry["all_passed"] = False


def _previous_summary(out_dir: Path) -> dict[str, Any]:
    try:
        problems = json.loads((out_dir / "summary.json").read_text()).get("problems")
    except (OSError, ValueError, AttributeError):
        return {}
    return problems if isinstance(problems, dict) else {}


def _summarize_file(path: Path) -> dict[str, Any]:
    from solkit.harness.evaluate import summarize
    from solkit.problems.schema import Trace

    traces = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                traces.append(Trace.model_validate_json(line))
            except Exception:  # noqa: BLE001 - a corrupt file is reported as not passed
                return {"traces": len(traces), "by_status": {"UNREADABLE": 1}, "all_passed": False}
    return summarize(traces)
