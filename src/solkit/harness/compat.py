"""SOL-ExecBench's command line on ``solkit eval``: its flags, its ``config.json``, its defaults.

``sol-execbench PROBLEM_DIR [--solution S] [--definition D --workload W] [--config C] [--lock-clocks]
[--keep-staging] [-o traces.jsonl] [--json] [-v]`` runs unchanged as ``solkit eval ...``. :data:`FLAGS` is
the flag-by-flag account (docs/sol-execbench.md prints it); :func:`resolve` turns the parsed arguments into
the problem, the solution and the evaluation options, applying ``config.json`` under the explicit flags.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError

#: Every flag of ``sol-execbench`` (SOL-ExecBench 1.0.2, ``sol_execbench.cli.main``) and what ``solkit eval`` does.
FLAGS: list[tuple[str, str, str]] = [
    ("PROBLEM_DIR", "same", "reads definition.json, workload.jsonl, and config.json / solution.json when present"),
    ("--definition FILE", "same", "definition.json anywhere; wins over PROBLEM_DIR's"),
    ("--workload FILE", "same", "a workload.jsonl (a value that is not a file is solkit's workload UUID filter)"),
    (
        "--solution FILE",
        "same, and more",
        "solution.json, or a .py defining run (as profile and tune take); "
        "without it and without PROBLEM_DIR/solution.json solkit evaluates the reference against itself "
        "(SOL-ExecBench stops)",
    ),
    ("--config FILE", "same", "config.json keys below; explicit solkit flags win over it"),
    ("--compile-timeout S", "same", "seconds for import/build (default 120)"),
    (
        "--timeout S",
        "per workload",
        "SOL-ExecBench: the whole evaluation (600 s); solkit: each workload (300 s), so one hang fails one trace",
    ),
    ("-o/--output FILE", "same", "trace JSONL, one trace per line"),
    ("--json", "same", "one trace per line on stdout (JSONL)"),
    (
        "--lock-clocks",
        "refused",
        "solkit never changes clocks or power limits; it records SM and memory clocks "
        "before and after timing (environment.telemetry) instead",
    ),
    ("--keep-staging", "same", "keeps the evaluation's work directory and prints where"),
    ("-v/--verbose", "same", "info logging, and every failing trace's whole log"),
]
#: ``config.json`` (SOL-ExecBench's BenchmarkConfig) key -> (solkit option, what it means there).
CONFIG_KEYS: dict[str, tuple[str, str]] = {
    "warmup_runs": ("warmup", "untimed calls before timing (SOL-ExecBench default 10, solkit 5)"),
    "iterations": ("reps", "timed calls per timing trial (both default 50; solkit runs 3 trials)"),
    "benchmark_reference": ("benchmark_reference", "time the reference too (default true)"),
    "seed": ("seed", "input seed (default 200; solkit salts it per run unless --fixed-seed)"),
    "lock_clocks": ("-", "refused when true, as --lock-clocks"),
}
LOCK_CLOCKS_REFUSAL = (
    "solkit never changes GPU clocks or power limits, so {what} is refused; it records the SM and memory clocks "
    "before and after the timing in each trace's environment.telemetry instead (docs/sol-execbench.md)"
)
#: eval options whose parser default is None so that config.json can fill them; the real defaults are here.
CONFIGURABLE_DEFAULTS = {"warmup": 5, "reps": 50, "seed": 200}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SOL-ExecBench's flags that ``solkit eval`` lacks otherwise (``--workload`` is shared, see :data:`FLAGS`)."""
    p.add_argument("--definition", default=None, metavar="definition.json", help="definition file (SOL-ExecBench)")
    keys = ", ".join(CONFIG_KEYS)
    p.add_argument("--config", default=None, metavar="config.json", help=f"SOL-ExecBench's BenchmarkConfig: {keys}")
    p.add_argument("--lock-clocks", action="store_true", help="refused: solkit never changes clocks (one line why)")
    p.add_argument("--keep-staging", action="store_true", help="keep the work directory and print where it is")
    p.add_argument("-v", "--verbose", dest="eval_verbose", action="count", default=argparse.SUPPRESS,
                   help="info logging and the whole log of every trace that did not pass")  # fmt: skip
    p.set_defaults(**dict.fromkeys(CONFIGURABLE_DEFAULTS))


@dataclass
class Resolved:
    """What to evaluate: the files, and the notes the compatibility layer made on the way."""

    definition: Path
    workloads: Path | None
    solution: Path | None
    config: Path | None
    uuids: list[str] | None
    notes: list[str] = field(default_factory=list)


def resolve(args: argparse.Namespace) -> Resolved:
    """Files and options from SOL-ExecBench's argv (positional dir, --definition/--workload/--config/--solution);
    fills ``args`` from config.json where the user gave no explicit flag; refuses --lock-clocks."""
    if getattr(args, "lock_clocks", False):
        raise SolkitError(LOCK_CLOCKS_REFUSAL.format(what="--lock-clocks"))
    workload_file, uuids = _split_workload_values(args.workload)
    problem_dir = Path(args.problem_dir) if args.problem_dir else None
    definition = Path(args.definition) if args.definition else None
    config = Path(args.config) if args.config else None
    solution = Path(args.solution) if args.solution else None
    notes: list[str] = []
    if problem_dir is not None and not problem_dir.is_dir():
        if not (problem_dir.is_file() and problem_dir.suffix == ".json" and definition is None):
            raise SolkitError(f"{problem_dir}: no such problem directory or definition file")
        definition, problem_dir = problem_dir, None  # solkit eval definition.json (as load_problem takes)
        if workload_file is None and (definition.parent / "workload.jsonl").is_file():
            workload_file = definition.parent / "workload.jsonl"
    if problem_dir is not None:
        definition = definition or problem_dir / "definition.json"
        if workload_file is None and not (problem_dir / "workload.jsonl").is_file():
            raise SolkitError(f"{problem_dir}: no workload.jsonl in this directory")
        workload_file = workload_file or problem_dir / "workload.jsonl"
        if config is None and (problem_dir / "config.json").is_file():
            config = problem_dir / "config.json"
        if solution is None and (problem_dir / "solution.json").is_file():
            solution = problem_dir / "solution.json"
    if definition is None:
        raise SolkitError("give PROBLEM_DIR or --definition definition.json")
    if not definition.is_file():
        raise SolkitError(f"--definition {definition}: no such file")
    if solution is None:
        notes.append("no --solution and no solution.json: the reference is evaluated against itself")
    if config is not None:
        apply_config(args, read_config(config))
    for key, value in CONFIGURABLE_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return Resolved(definition, workload_file, solution, config, uuids, notes)


def _split_workload_values(values: list[str] | None) -> tuple[Path | None, list[str] | None]:
    """``--workload`` values: a file (SOL-ExecBench's workload.jsonl) or workload UUIDs (solkit's filter)."""
    files = [v for v in values or [] if Path(v).is_file() or v.endswith((".jsonl", ".json"))]
    uuids = [v for v in values or [] if v not in files]
    if len(files) > 1:
        raise SolkitError(f"--workload: one workload file, got {len(files)} ({', '.join(files)})")
    if files and not Path(files[0]).is_file():
        raise SolkitError(f"--workload {files[0]}: no such file")
    return (Path(files[0]) if files else None), (uuids or None)


def read_config(path: Path) -> dict[str, Any]:
    """SOL-ExecBench's config.json, checked as its BenchmarkConfig checks it (one line naming the key)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SolkitError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise SolkitError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SolkitError(f"{path}: expected a JSON object with keys {sorted(CONFIG_KEYS)}")
    if unknown := sorted(set(data) - set(CONFIG_KEYS)):
        raise SolkitError(f"{path}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(CONFIG_KEYS))}")
    for key in ("warmup_runs", "iterations", "seed"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], int)):
            raise SolkitError(f"{path}: {key} must be an integer, got {data[key]!r}")
    for key in ("benchmark_reference", "lock_clocks"):
        if key in data and not isinstance(data[key], bool):
            raise SolkitError(f"{path}: {key} must be true or false, got {data[key]!r}")
    if data.get("warmup_runs", 0) < 0:
        raise SolkitError(f"{path}: warmup_runs must be >= 0")
    if "iterations" in data and data["iterations"] <= 0:
        raise SolkitError(f"{path}: iterations must be > 0")
    if data.get("lock_clocks"):
        raise SolkitError(LOCK_CLOCKS_REFUSAL.format(what=f'"lock_clocks": true in {path}'))
    return data


def apply_config(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """Fill ``args`` from a checked config: an explicit flag (a value that is not None) wins."""
    for key in ("warmup_runs", "iterations", "seed"):
        dest = CONFIG_KEYS[key][0]
        if key in config and getattr(args, dest, None) is None:
            setattr(args, dest, config[key])
    if config.get("benchmark_reference") is False:
        args.no_reference_timing = True


def phase_summary(traces) -> str:
    """One line for people: the run's one-off phases and the per-workload phases summed over the traces."""
    from solkit.harness.phases import RUN_PHASES, WORKLOAD_PHASES

    records = [(t.evaluation.solkit or {}).get("phases_s") or {} for t in traces]
    if not records:
        return ""
    run = records[0].get("run") or {}
    parts = [f"{k} {run[k]:.2f}" for k in RUN_PHASES if run.get(k) is not None]
    sums = {k: sum(r.get(k) or 0.0 for r in records) for k in WORKLOAD_PHASES}
    parts += [f"{k} {v:.2f}" for k, v in sums.items() if v]
    overhead = sum(r.get("overhead_per_workload") or 0.0 for r in records) / len(records)
    return (f"seconds per phase: {', '.join(parts)}; overhead per workload {overhead:.2f} (all but timing and "
            "reference_timing)")  # fmt: skip


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere): the CLI's own start-up, imports included."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None
