# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""Replay every search strategy on recorded sweeps (CPU only) and plot fraction-of-best vs evaluations.

    python lab/benchmarks/tune_replay.py --data benchmarks/results/tuner/2026-11-30_h200_sweeps --out benchmarks/results/tuner/2026-11-30_h200_replay
    python lab/benchmarks/tune_replay.py --data tests/tune/data --out /tmp/replay --seeds 5   # synthetic fixture

Writes ``replay.json`` (per strategy: geomean, 95% bootstrap CI, p10/p50/p90 and success rate at each
budget, per-task curves; the issue's targets checked) and ``replay.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # tiny linear algebra: threads only add overhead

import numpy as np  # noqa: E402

from solkit.tune.replay import load_landscapes, prior_for, replay, replay_seconds  # noqa: E402
from solkit.tune.strategies import DEFAULT_BUDGET, DEFAULT_STRATEGY  # noqa: E402

RUNS = [  # (label, strategy, warm start)
    ("exhaustive", "exhaustive", False),
    ("random", "random", False),
    (f"{DEFAULT_STRATEGY} (default)", DEFAULT_STRATEGY, False),
    (f"{DEFAULT_STRATEGY} + warm start", DEFAULT_STRATEGY, True),
    ("bandit (UCB)", "bandit", False),
    ("bandit (UCB) + warm start", "bandit", True),
    ("annealing", "annealing", False),
    ("coordinate descent", "coordinate", False),
    ("tpe (optuna)", "tpe", False),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["benchmarks/results/tuner/2026-11-30_h200_sweeps"])
    ap.add_argument("--out", default="benchmarks/results/tuner/2026-11-30_h200_replay")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--only", default="", help="comma-separated strategy names to run")
    args = ap.parse_args()
    lands = load_landscapes(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    have_optuna = importlib.util.find_spec("optuna") is not None
    results = {}
    for label, strat, warm in RUNS:
        if args.only and strat not in args.only.split(","):
            continue
        if strat == "tpe" and not have_optuna:
            print("skipping tpe: optuna is not installed", flush=True)
            continue
        t0 = time.perf_counter()
        res = replay(lands, strat, args.budget, seeds=args.seeds, warm=warm)
        res["cpu_seconds"] = time.perf_counter() - t0
        res["seconds_budget"] = seconds_curve(lands, strat, warm, args.seeds)
        results[label] = res
        s = res["summary"]
        print(
            f"{label:28s} geomean@10 {s['geomean'][9]:.3f} @20 {s['geomean'][19]:.3f} @30 {s['geomean'][29]:.3f} "
            f"(p10 {s['p10'][29]:.3f}) @50 {s['geomean'][49]:.3f}  [{res['cpu_seconds']:.0f}s]",
            flush=True,
        )
    checks = targets(results)
    tasks = [
        {
            "task": la.name,
            "kernel": la.kernel,
            "space": len(la.space),
            "recorded": len(la.times),
            "failed": sum(t is None for t in la.times.values()),
            "best_ms": la.best_ms,
            "best_any_ms": la.best_any_ms,
            "device": la.header.get("device", {}).get("name"),
        }
        for la in lands
    ]
    sweep_device = lands[0].header.get("device", {})
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        "data": args.data,
        "seeds": args.seeds,
        "budget": args.budget,
        "tasks": tasks,
        "default_strategy": DEFAULT_STRATEGY,
        "default_budget": DEFAULT_BUDGET,
        "sweep_device": sweep_device,
        "sweep_dates": sorted({la.header.get("date", "") for la in lands}),
    }
    payload = {
        "meta": meta,
        "targets": checks,
        "strategies": {k: {kk: v for kk, v in r.items() if kk != "options"} for k, r in results.items()},
    }
    (out / "replay.json").write_text(json.dumps(payload, indent=1))
    plot(results, out / "replay.png", len(lands), args.seeds)
    print(json.dumps(checks, indent=1))
    return 0


SECONDS = (1.0, 2.0, 5.0, 10.0, 20.0)


def seconds_curve(lands, strat: str, warm: bool, seeds: int) -> dict:
    """Geomean / p10 fraction of best after simulated tuning seconds (recorded compile + bench costs)."""
    out = {}
    for sec in SECONDS:
        fr, ev = [], []
        for land in lands:
            prior = prior_for(land, lands) if warm else None
            for seed in range(seeds if strat != "exhaustive" else 1):
                f, n = replay_seconds(land, strat, sec, seed, prior)
                fr.append(f)
                ev.append(n)
        fr_arr = np.maximum(np.array(fr), 1e-6)
        out[str(sec)] = {"geomean": float(np.exp(np.log(fr_arr).mean())), "p10": float(np.percentile(fr_arr, 10)),
                         "mean_evaluations": float(np.mean(ev))}  # fmt: skip
    return out


def targets(results: dict) -> dict:
    """The issue's done-when criteria, evaluated on these replays."""
    out: dict = {}
    default = results.get(f"{DEFAULT_STRATEGY} (default)")
    if default:
        s = default["summary"]
        g, p = s["geomean"][DEFAULT_BUDGET - 1], s["p10"][DEFAULT_BUDGET - 1]
        out["default_at_30"] = {
            "geomean": g,
            "p10": p,
            "target": "geomean >= 0.95 and p10 >= 0.90",
            "met": g >= 0.95 and p >= 0.90,
        }
    rnd = results.get("random")
    for label in ("bandit (UCB)", "bandit (UCB) + warm start"):
        if rnd and label in results:
            b, r = results[label]["summary"]["geomean"], rnd["summary"]["geomean"]
            margins = [b[i] - r[i] for i in range(9, min(50, len(b)))]
            out[f"{label} beats random 10..50"] = {
                "min_margin": min(margins),
                "worst_budget": 10 + margins.index(min(margins)),
                "met": min(margins) > 0,
            }
    return out


def plot(results: dict, path: Path, n_tasks: int, seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    for ax, zoom in zip(axes[:2], (False, True)):
        for label, res in results.items():
            s = res["summary"]
            x = s["budget"]
            (line,) = ax.plot(x, s["geomean"], label=label, lw=2 if "default" in label or label == "random" else 1.2)
            ax.fill_between(x, s["ci95_lo"], s["ci95_hi"], color=line.get_color(), alpha=0.18, lw=0)
            if zoom and ("default" in label or label == "random"):
                ax.plot(x, s["p10"], ls=":", color=line.get_color(), lw=1)
        ax.axhline(0.95, color="grey", lw=0.8, ls="--")
        ax.axvline(30, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("evaluations (failed configs included)")
        ax.grid(alpha=0.3)
        if zoom:
            ax.set_ylim(0.6, 1.005)
            ax.set_title("zoom; dotted: 10th percentile (default, random)")
        else:
            ax.set_ylim(0, 1.02)
            ax.set_title(f"geomean over {n_tasks} tasks x {seeds} seeds, band = 95% bootstrap CI")
    axes[0].set_ylabel("fraction of exhaustive best (T_best / T_found)")
    axes[0].legend(fontsize=8, loc="lower right")
    ax = axes[2]
    for label, res in results.items():
        sec = res.get("seconds_budget", {})
        xs = [float(k) for k in sec]
        ax.plot(xs, [v["geomean"] for v in sec.values()], marker="o", ms=3, label=label,
                lw=2 if "default" in label or label == "random" else 1.2)  # fmt: skip
    ax.set_xscale("log")
    ax.set_ylim(0.6, 1.005)
    ax.axhline(0.95, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("simulated tuning seconds (recorded costs)")
    ax.set_title("fraction of best vs wall time (geomean)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
