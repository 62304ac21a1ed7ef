"""SOL-ExecBench-compatible problem files: schemas (:mod:`.schema`), loading (:mod:`.loader`),
safe axis expressions (:mod:`.expr`). See :mod:`solkit.problems.loader` for the stable API."""

from solkit.problems.loader import Problem, load_definition, load_problem, load_reference, load_solution, load_workloads

__all__ = ["Problem", "load_definition", "load_problem", "load_reference", "load_solution", "load_workloads"]
