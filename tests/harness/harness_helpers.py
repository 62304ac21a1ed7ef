"""Shared helpers for the harness tests: paths, fast evaluation options."""

from __future__ import annotations

from pathlib import Path

import torch

from solkit.harness.evaluate import EvalOptions

HERE = Path(__file__).parent
EXAMPLES = HERE / "examples"
CHEATS = HERE / "cheats"
CHEAT_PROBLEM = CHEATS / "_problem"
SMALL_CHEAT_WORKLOADS = ["cheat-rows64-h256", "cheat-rows33-h1000"]


def fast_options(**over) -> EvalOptions:
    """Few, short timing repetitions: tests check behaviour, benchmarks check speed."""
    opts = EvalOptions(
        device="cuda:0" if torch.cuda.is_available() else "cpu",
        cpu_threads=1,
        reps=3,
        timing_trials=3,
        warmup=1,
        cpu_timing_budget_s=0.2,
        min_reps=1,
        run_timeout=120,
        compile_timeout=120,
    )
    for k, v in over.items():
        setattr(opts, k, v)
    return opts


def small_workloads(problem_dir: Path) -> list[str]:
    from solkit.problems import load_problem

    return [w.uuid for w in load_problem(problem_dir).workloads if "bench" not in w.uuid and "gpu" not in w.uuid]
