"""``solkit tune``: tune a Triton solution of a problem, or replay strategies on recorded sweeps.

solkit tune PROBLEM_DIR --solution FILE [--strategy S] [--budget N] [--warm-start-from DEVICE] [--json]
solkit tune --replay DATA [DATA ...] --strategy S --budget N [--seeds K] [--warm] [--json]
solkit tune --cache-export FILE | --cache-import FILE
"""

from __future__ import annotations

import argparse
from typing import Any

from solkit.errors import SolkitError


def register(subparsers: argparse._SubParsersAction) -> None:
    from solkit.tune.strategies import DEFAULT_BUDGET, DEFAULT_STRATEGY, STRATEGIES

    p = subparsers.add_parser(
        "tune",
        help="search-based autotuning of Triton kernels (live, or replayed on recorded sweeps)",
        description="Tune a Triton solution that declares a search space, or replay search strategies on "
        "recorded exhaustive sweeps (no GPU needed).",
    )
    p.add_argument("problem_dir", nargs="?", help="problem directory (definition.json, workload.jsonl)")
    p.add_argument("--solution", help="Triton solution file (solution.json or .py) declaring SOLKIT_TUNE_SPACE")
    p.add_argument("--replay", nargs="+", metavar="DATA", help="sweep files (.jsonl) or directories of them")
    p.add_argument("--strategy", default=DEFAULT_STRATEGY, help=f"one of: {', '.join(STRATEGIES)}")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="evaluations (default %(default)s)")
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds (live: wall clock; replay: simulated from the recorded compile and bench costs)",
    )
    p.add_argument("--seeds", type=int, default=25, help="replay: seeds per task (default %(default)s)")
    p.add_argument("--warm", action="store_true", help="replay: warm start from the other shapes of each kernel")
    p.add_argument("--workload", type=int, default=0, help="live: index of the workload to tune on")
    p.add_argument(
        "--workloads",
        default=None,
        metavar="all|0,2,5",
        help="live: tune each of these workloads (one search each; with --devices/--ray, in parallel)",
    )
    p.add_argument(
        "--devices",
        default=None,
        metavar="all|0,1,3|cpu,cpu|cpu:N",
        help="live, with --workloads: one worker per device, sharing the cache (docs/scale.md)",
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="auto|local|ADDRESS",
        help="live, with --workloads: on a Ray cluster, one actor per GPU (needs solkit[ray])",
    )
    p.add_argument(
        "--isolate",
        action="store_true",
        help="live: benchmark in a restartable child process (survives illegal addresses and hangs)",
    )
    p.add_argument(
        "--warm-start-from",
        metavar="ARCH_OR_FINGERPRINT",
        default=None,
        help="live: seed the search with the best configs the cache holds from another device (product id, device "
        "name, sm_XY or fingerprint id); they are measured again here",
    )
    p.add_argument("--cache-dir", default=None, help="tuning cache directory (default: user cache dir)")
    p.add_argument("--cache-export", metavar="FILE", help="write the whole tuning cache to FILE")
    p.add_argument("--cache-import", metavar="FILE", help="merge FILE into the tuning cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.budget < 1:
        raise SolkitError(f"--budget must be at least 1 (got {args.budget})")
    if args.cache_export or args.cache_import:
        return _cache_io(args)
    if args.replay:
        return _replay(args)
    if not args.problem_dir or not args.solution:
        raise SolkitError("give PROBLEM_DIR with --solution FILE, or --replay DATA (see solkit tune --help)")
    _interpreter_on_cpu()
    if args.workloads or args.devices or args.ray:
        return _many(args)
    from solkit.tune.solution import tune_solution

    result = tune_solution(args.problem_dir, args.solution, strategy=args.strategy, budget=args.budget,
                           time_budget_s=args.time_budget, workload_index=args.workload,
                           cache_dir=args.cache_dir, isolate=args.isolate,
                           warm_start_from=args.warm_start_from)  # fmt: skip
    return _print_live(result, args.json)


def _interpreter_on_cpu() -> None:
    """Without a CUDA device Triton has no driver: run the solution through its interpreter, and say so once."""
    import os

    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        os.environ["TRITON_INTERPRET"] = "1"  # read when the solution's kernels are decorated and launched
        from solkit.output import warn

        warn("no CUDA device: Triton runs through its interpreter (TRITON_INTERPRET=1); the ranking is the "
             "interpreter's, not a GPU's")  # fmt: skip


def _many(args: argparse.Namespace) -> int:
    """--workloads: one search per workload, serially or on the pool of --devices / --ray."""
    from solkit.output import console, print_json, table
    from solkit.problems import load_problem
    from solkit.scale import open_pool
    from solkit.tune.shards import tune_workloads, workload_indices

    if not args.workloads:
        raise SolkitError("--devices/--ray spread workloads: give --workloads all (or indices such as 0,2)")
    indices = workload_indices(args.workloads, len(load_problem(args.problem_dir).workloads))
    options = {
        "strategy": args.strategy,
        "budget": args.budget,
        "time_budget_s": args.time_budget,
        "cache_dir": args.cache_dir,
        "isolate": args.isolate,
        "warm_start_from": args.warm_start_from,
    }
    results = tune_workloads(open_pool(args.devices, args.ray), args.problem_dir, args.solution, indices, options)
    failed = [r for r in results if r.get("best") is None]
    if args.json:
        print_json({"workloads": results})
    else:
        rows = [
            (
                r["workload_index"],
                str(r.get("axes", "")),
                str(r.get("best")),
                r.get("best_ms"),
                len(r.get("evaluations", [])),
                r.get("device_name"),
                r.get("error") or "",
            )
            for r in results
        ]
        console.print(
            table(
                f"solkit tune: {args.solution} on {args.problem_dir}",
                ["workload", "axes", "best", "ms", "evaluated", "device", "error"],
                rows,
            )
        )
    return 1 if failed else 0


def _cache_io(args: argparse.Namespace) -> int:
    from solkit.output import console, print_json
    from solkit.tune.cache import TuneCache

    cache = TuneCache(args.cache_dir)
    out: dict[str, Any] = {"cache": str(cache.root)}
    if args.cache_import:
        out["imported_entries"] = cache.import_(args.cache_import)
    if args.cache_export:
        out["exported_entries"] = cache.export(args.cache_export)
        out["file"] = args.cache_export
    if args.json:
        print_json(out)
    else:
        console.print(", ".join(f"{k}: {v}" for k, v in out.items()))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from solkit.output import console, print_json, table
    from solkit.tune.replay import load_landscapes, replay
    from solkit.tune.strategies import STRATEGIES

    if args.strategy not in STRATEGIES:
        from solkit.errors import choices_hint

        raise SolkitError(choices_hint(args.strategy, list(STRATEGIES), "strategy"))
    if args.seeds < 1:
        raise SolkitError(f"--seeds must be at least 1 (got {args.seeds})")
    lands = load_landscapes(args.replay)
    if args.time_budget is not None:
        return _replay_seconds(lands, args)
    res = replay(lands, args.strategy, args.budget, seeds=args.seeds, warm=args.warm)
    s = res["summary"]
    b = args.budget
    res["at_budget"] = {k: s[k][b - 1] for k in ("geomean", "ci95_lo", "ci95_hi", "p10", "p50", "success95")}
    res["tasks_at_budget"] = {name: {"geomean": t["geomean"][b - 1], "p10": t["p10"][b - 1]}
                              for name, t in res["tasks"].items()}  # fmt: skip
    if args.json:
        print_json(res)
        return 0
    rows = [(name, len(land.space), t["geomean"], t["p10"]) for land, (name, t) in
            zip(lands, res["tasks_at_budget"].items())]  # fmt: skip
    a = res["at_budget"]
    console.print(table(f"replay: {args.strategy}{' (warm start)' if args.warm else ''}, budget {b}, "
                        f"{args.seeds} seeds — fraction of exhaustive best",
                        ["task", "space", "geomean", "p10"], rows,
                        caption=f"all tasks: geomean {a['geomean']:.3f} (95% CI {a['ci95_lo']:.3f}–"
                        f"{a['ci95_hi']:.3f}), p10 {a['p10']:.3f}, ≥0.95 in {a['success95']:.0%} of runs"))  # fmt: skip
    return 0


def _replay_seconds(lands, args: argparse.Namespace) -> int:
    import numpy as np

    from solkit.output import console, print_json, table
    from solkit.tune.replay import prior_for, replay_seconds

    if args.time_budget <= 0:
        raise SolkitError(f"--time-budget must be positive (got {args.time_budget})")
    tasks = {}
    for land in lands:
        prior = prior_for(land, lands) if args.warm else None
        runs = [replay_seconds(land, args.strategy, args.time_budget, s, prior) for s in range(args.seeds)]
        fr = np.maximum([r[0] for r in runs], 1e-6)
        tasks[land.name] = {"geomean": float(np.exp(np.log(fr).mean())), "p10": float(np.percentile(fr, 10)),
                            "mean_evaluations": float(np.mean([r[1] for r in runs]))}  # fmt: skip
    allg = float(np.exp(np.mean([np.log(max(t["geomean"], 1e-6)) for t in tasks.values()])))
    out = {"strategy": args.strategy, "warm": args.warm, "seconds": args.time_budget, "seeds": args.seeds,
           "geomean_over_tasks": allg, "tasks": tasks}  # fmt: skip
    if args.json:
        print_json(out)
        return 0
    rows = [(k, v["mean_evaluations"], v["geomean"], v["p10"]) for k, v in tasks.items()]
    title = f"replay: {args.strategy}, {args.time_budget:g} simulated s, {args.seeds} seeds"
    cols = ["task", "evaluations", "geomean", "p10"]
    console.print(table(title, cols, rows, caption=f"geomean over tasks {allg:.3f}"))
    return 0


def _print_live(result: dict[str, Any], as_json: bool) -> int:
    from solkit.output import console, print_json, table

    ev = result.get("evaluations", [])
    failed = result.get("best") is None
    if as_json:
        print_json(result)
        return 1 if failed else 0
    if failed:  # every config failed: say why, and fail the command (never "best None at None ms")
        from solkit.output import warn

        errors = list(dict.fromkeys(f"{e['status']}: {e.get('error') or 'no message'}" for e in ev))
        warn(f"no configuration ran: {len(ev)} evaluated, every one failed")
        for line in errors[:5]:
            warn(line)
        if len(errors) > 5:
            warn(f"... and {len(errors) - 5} more distinct errors (--json lists them all)")
        return 1
    rows = [(str(e["config"]), e["status"], e.get("time_ms")) for e in sorted(
        ev, key=lambda e: (e.get("time_ms") is None, e.get("time_ms") or 0))[:10]]  # fmt: skip
    caption = (
        f"best {result.get('best')} at {result.get('best_ms')} ms; {len(ev)} evaluated in "
        f"{result.get('seconds', 0):.1f} s; statuses {result.get('statuses')}"
    )
    title = f"solkit tune: {result.get('solution', '')} on {result.get('problem', '')}"
    console.print(table(title, ["config", "status", "ms"], rows, caption=caption))
    return 0
