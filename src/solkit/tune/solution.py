"""Tune a Triton *solution* of a problem (SOL-ExecBench format: definition.json, workload.jsonl, solution.json).

How a solution declares what to tune (the convention of ``solkit tune``):

* its entry module defines ``SOLKIT_TUNE_SPACE``, the dict form of a :class:`~solkit.tune.space.Space`::

      SOLKIT_TUNE_SPACE = {
          "params": {"BLOCK_N": [512, 1024, 2048, 4096], "num_warps": [2, 4, 8, 16]},
          "constraints": ["BLOCK_N >= 64 * num_warps"],
      }

* its entry function takes those parameters as keyword arguments, with the hand-picked values as
  defaults, so the harness (which passes none) runs the defaults and the tuner passes each config:
  ``def run(hidden_states, weight, output, *, BLOCK_N=1024, num_warps=4): ...``

Each config is checked against the problem's reference on fresh random inputs (outputs poisoned)
and timed with the harness protocol. The solution's kernels are compiled at their first launch in
this process (the tuner cannot build a solution's compile jobs for it), one at a time.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.tune.cache import TuneCache, environment, make_key
from solkit.tune.records import ProblemRef, TuneProblem
from solkit.tune.space import Space, smem_limit
from solkit.tune.tuner import tune


def _entry_module(solution_path: Path) -> tuple[Any, str, bool, str]:
    """(module, entry symbol, destination-passing style, solution name) of a solution.json or .py file."""
    from solkit.problems import load_solution
    from solkit.problems.loader import import_source

    if solution_path.suffix == ".py":
        name = f"solkit_tune_sol_{abs(hash(str(solution_path.resolve()))) % 10**8}"
        module = import_source(solution_path.read_text(), name, tempfile.mkdtemp(prefix="solkit_tune_"))
        return module, "run", bool(getattr(module, "SOLKIT_DESTINATION_PASSING", True)), solution_path.stem
    sol = load_solution(solution_path)
    if not any(lang.value == "triton" for lang in sol.spec.languages):
        langs = [lang.value for lang in sol.spec.languages]
        raise SolkitError(f"{solution_path}: spec.languages {langs} — only Triton solutions can be tuned")
    workdir = Path(tempfile.mkdtemp(prefix="solkit_tune_"))
    for src in sol.sources:
        (workdir / src.path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / src.path).write_text(src.content)
    sys.path.insert(0, str(workdir))  # sibling sources import each other by name
    entry = Path(sol.spec.entry_file)
    module_name = f"solkit_tune_{entry.stem}_{abs(hash(sol.name)) % 10**8}"
    module = import_source((workdir / entry).read_text(), module_name, workdir)
    return module, sol.spec.entry_symbol, sol.spec.destination_passing_style, sol.name


def solution_problem(
    problem_dir: str | Path, solution_file: str | Path, workload_index: int = 0
) -> tuple[TuneProblem, Space, dict[str, Any]]:
    """The tuning problem of one workload of a solution, its declared space, and facts for the cache key."""
    from solkit.harness.inputs import InputFactory
    from solkit.problems import load_problem

    problem = load_problem(problem_dir)
    solution_path = Path(solution_file)
    if not solution_path.is_file():
        raise SolkitError(f"--solution {solution_path}: no such file (give a solution.json or a .py file)")
    module, symbol, dps, sol_name = _entry_module(solution_path)
    spec = getattr(module, "SOLKIT_TUNE_SPACE", None)
    if spec is None:
        raise SolkitError(f"{solution_path}: the solution declares no SOLKIT_TUNE_SPACE dict (see docs/tune.md)")
    space = Space.from_dict(spec, smem_limit_bytes=smem_limit())
    fn = getattr(module, symbol, None)
    if not callable(fn):
        raise SolkitError(f"{solution_path}: no callable {symbol!r} in the entry module")
    if not 0 <= workload_index < len(problem.workloads):
        raise SolkitError(f"--workload {workload_index}: the problem has workloads 0..{len(problem.workloads) - 1}")
    workload = problem.workloads[workload_index]
    problem.validate_workload(workload)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    factory = InputFactory(problem, device)
    in_names = list(problem.definition.inputs)
    out_names = list(problem.definition.outputs)
    n_in = len(in_names)

    def make_inputs(seed_: int) -> tuple:
        inputs = factory.generate(workload, trial=seed_)
        values = [inputs[n] for n in in_names]
        if dps:
            outs = factory.allocate_outputs(workload)
            values += [outs[n] for n in out_names]
        return tuple(values)

    def run(config: dict, values: tuple):
        result = fn(*values, **config)
        if dps:
            return tuple(values[n_in:])
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)

    def reference(values: tuple):
        up = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values[:n_in]]
        got = problem.reference_fn()(*up)
        return tuple(got) if isinstance(got, (tuple, list)) else (got,)

    def same_dtype(values: tuple):
        got = problem.reference_fn()(*values[:n_in])
        return tuple(got) if isinstance(got, (tuple, list)) else (got,)

    tprob = TuneProblem(
        name=f"{problem.name}/{sol_name}",
        make_inputs=make_inputs,
        run=run,
        reference=reference,
        same_dtype=same_dtype,
        output_index=list(range(n_in, n_in + len(out_names))) if dps else None,
        fresh_check_inputs=True,
        rel_tol=2e-3,
        ref=ProblemRef(__name__, "_problem_only", (str(problem_dir), str(solution_file), workload_index)),
    )
    info = {
        "problem": problem.name,
        "solution": sol_name,
        "workload": workload.uuid,
        "axes": problem.resolve_axes(workload),
        "dtypes": [str(v) for v in problem.input_dtypes().values()],
        "device": device,
        "digest": _source_digest(solution_path),
    }
    return tprob, space, info


def _problem_only(problem_dir: str, solution_file: str, workload_index: int) -> TuneProblem:
    return solution_problem(problem_dir, solution_file, workload_index)[0]


def tune_solution(
    problem_dir: str | Path,
    solution_file: str | Path,
    *,
    strategy: str = "guided",
    budget: int = 30,
    time_budget_s: float | None = None,
    workload_index: int = 0,
    cache_dir: str | Path | None = None,
    seed: int = 0,
    isolate: bool = False,
    warm_start_from: str | None = None,
) -> dict[str, Any]:
    """Tune one workload of a solution; ``warm_start_from`` names another device whose cached records seed the
    search (its best configs are measured here first; see :meth:`TuneCache.warm_start`)."""
    tprob, space, info = solution_problem(problem_dir, solution_file, workload_index)
    cache = TuneCache(cache_dir)
    kernel = f"{info['problem']}:{info['solution']}:{info['digest']}"
    key = make_key(kernel, info["axes"], info["dtypes"], environment())
    prior, seeds, sources = cache.warm_start(key, warm_start_from) if warm_start_from else (None, None, [])
    res = tune(tprob, space, strategy=strategy, budget=budget, seed=seed, time_budget_s=time_budget_s, cache=cache,
               cache_key=key, pool=None, isolate=isolate, prior=prior, seeds=seeds)  # fmt: skip
    out = res.to_dict()
    if warm_start_from:
        out["warm_started_from"] = {"source": warm_start_from, "devices": sources, "seed_configs": seeds}
    out.update({k: info[k] for k in ("problem", "solution", "workload", "axes", "device")})
    return out


def _source_digest(path: Path) -> str:
    import hashlib

    files = [path] + sorted(p for p in path.parent.glob("*.py") if p != path)
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
