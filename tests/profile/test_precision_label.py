"""The precision basis of the analysis travels with `solkit eval` traces and `solkit profile` targets."""

from __future__ import annotations

from pathlib import Path

from solkit.harness.evaluate import sol_for
from solkit.problems import load_problem
from solkit.profile.target import load_target

TINY = Path(__file__).parent / "problems" / "tiny_rmsnorm"


def test_profile_target_and_eval_sol_carry_the_precision():
    assert load_target(TINY, "tiny-m5", None, "cpu").model_precision == "fastest"
    problem = load_problem(TINY)
    workload = next(w for w in problem.workloads if w.uuid == "tiny-m5")
    sol, why = sol_for(problem, workload, {"device": {"arch_id": "h200-sxm"}}, "spec")
    assert why is None and sol["precision"] == "fastest" and sol["source"].startswith("solkit.sol.analysis")
