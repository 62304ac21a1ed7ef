"""Evaluate a solution (or the reference itself) on a problem's workloads and produce Traces.

``evaluate(problem_dir, solution_path=None, options)`` → list of
:class:`~solkit.problems.schema.Trace`, one per workload, always (failures included). The work runs
in a subprocess (:mod:`.runner` / :mod:`.worker`); this module adds what needs no device:

* the environment block (device, versions, seed, timing method, clocks and power before/after the
  timing from :mod:`solkit.hardware.telemetry` when available);
* SOL: T_SOL for the workload from :mod:`solkit.sol.analysis` when present, else from the
  definition's own ``"solkit": {"flops": {...}, "bytes": "..."}`` formulas, else skipped with a note;
  then the SOL fraction (capped at 1, a time below T_SOL flagged as ``sol_violation``) and the
  anchored score against the reference's measured time.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as _dt
import hashlib
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.harness.phases import phase_record, timeline
from solkit.harness.spawn import Ahead, candidate_job, device_guess, spawn_candidate
from solkit.problems.expr import evaluate as eval_expr
from solkit.problems.loader import Problem, load_problem, load_solution, solution_from_python
from solkit.problems.schema import (
    BuildSpec,
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Solution,
    SourceFile,
    Trace,
    Workload,
)

log = logging.getLogger(__name__)


@dataclass
class EvalOptions:
    """Knobs of one evaluation (defaults follow docs/format.md)."""

    device: str = "auto"
    seed: int = 200
    trials: int = 3  # correctness trials, each with fresh inputs
    reps: int = 50  # timed repetitions per timing trial
    timing_trials: int = 3
    warmup: int = 5
    method: str = "auto"  # GPU: auto (kernel span from the profiler; else graph_events < 100 µs, else events),
    # kernel, graph_events, events, graph
    cooldown_ms: float = 0.0  # GPU idle before every timed call (isolated launches, as under Nsight Compute)
    pool: int = 3  # rotating input sets during timing
    matched_ratio: float | None = None  # override of required_matched_ratio
    precision_check: bool = True
    benchmark_reference: bool = True
    compile_timeout: float = 120.0
    run_timeout: float = 300.0
    cpu_timing_budget_s: float = 5.0  # CPU wall-clock timing is cut to fit this (reps recorded)
    gpu_timing_budget_s: float = 60.0
    min_reps: int = 5
    sol_basis: str = "spec"
    workloads: list[str] | None = None  # subset of uuids
    max_workloads: int | None = None
    work_dir: str | None = None
    cpu_threads: int | None = None  # torch intra-op threads in the worker (None: torch's default)
    l2_flush: str = "read"  # "read": leave the L2 clean, as Nsight Compute does; "write": memset
    prewarm_s: float = 0.25  # back-to-back calls before timing on a GPU, so clocks settle
    use_fork_server: bool = True
    sandbox: str = "auto"  # auto: contain the candidate as far as the OS allows; require: refuse without it; off
    secret_seed: bool = True  # salt the seed with a per-run secret (recorded in the trace after the run)
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved_device(self) -> str:
        import torch  # here, not at the top: the judge imports torch while the candidate process starts

        if self.device in ("auto", "", None):
            return "cuda:0" if torch.cuda.is_available() else "cpu"
        dev = str(self.device)
        if dev == "cuda":
            dev = "cuda:0"
        if not (dev == "cpu" or dev.startswith("cuda:") and dev[5:].isdigit()):
            raise SolkitError(f"--device {dev!r}: allowed values are cpu, cuda, cuda:N")
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise SolkitError(f"--device {dev}: no CUDA device is available here; use --device cpu")
        if dev.startswith("cuda:") and int(dev[5:]) >= torch.cuda.device_count():
            raise SolkitError(f"--device {dev}: only {torch.cuda.device_count()} CUDA device(s)")
        return dev


def reference_solution(problem: Problem) -> Solution:
    """The definition's reference wrapped as a (return-style, pytorch) solution, for sanity runs."""
    return Solution(
        name=f"{problem.name}__reference",
        definition=problem.name,
        author="solkit",
        description="the definition's reference evaluated against itself",
        spec=BuildSpec(languages=["pytorch"], entry_point="reference.py::run", destination_passing_style=False),
        sources=[SourceFile(path="reference.py", content=problem.definition.reference)],
    )


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _workloads(problem: Problem, options: EvalOptions) -> list[Workload]:
    ws = problem.workloads
    if options.workloads:
        known = {w.uuid for w in ws}
        bad = [u for u in options.workloads if u not in known]
        if bad:
            raise SolkitError(f"--workload {bad[0]!r}: not in {problem.workload_path}")
        ws = [w for w in ws if w.uuid in set(options.workloads)]
    if options.max_workloads is not None:
        ws = ws[: max(options.max_workloads, 0)]
    return ws


def evaluate(
    problem_dir: str | Path,
    solution_path: str | Path | None = None,
    options: EvalOptions | None = None,
    workload_path: str | Path | None = None,
    lookahead=None,
):
    """Evaluate and return one Trace per workload (see module docstring). ``problem_dir`` is a problem directory
    or a definition.json (``workload_path`` then names the workloads when they are not beside it). ``lookahead``: a
    serial suite's :class:`solkit.harness.lookahead.Lookahead` (candidate processes started for the next
    evaluations while this one does no timed work)."""
    options = dataclasses.replace(options or EvalOptions(), extra=dict((options.extra if options else None) or {}))
    t0 = time.perf_counter()
    options.extra["started_at"] = time.time()  # the timeline's zero (docs/sol-execbench.md)
    problem = load_problem(problem_dir, workload_path)
    if not problem.workloads:
        raise SolkitError(f"{problem_dir}: no workloads (workload.jsonl missing or empty)")
    solution, note = solution_for(problem, solution_path)
    if note:
        options.extra["notes"] = {**(options.extra.get("notes") or {}), "definition": note}
        log.warning("%s", note)
    options.extra["load_s"] = time.perf_counter() - t0
    options.extra["judge_t0"] = time.perf_counter()
    ahead = lookahead.take(problem_dir, solution_path) if lookahead is not None else None
    fill_between = ahead is not None  # this one is ready: the next batch starts after its reference
    if ahead is None:
        ahead = spawn_ahead(problem, solution, options)
        if lookahead is not None:
            lookahead.fill()  # beside this evaluation's own candidate's start-up
    try:
        return evaluate_loaded(problem, solution, options, ahead, lookahead, fill_between)
    finally:
        if ahead is not None and not ahead.spawned.adopted:  # the evaluation stopped before it started
            ahead.spawned.discard()
            if not options.work_dir:
                shutil.rmtree(ahead.work_dir, ignore_errors=True)


def spawn_ahead(problem: Problem, solution: Solution, options: EvalOptions) -> Ahead | None:
    """Start the candidate process for the job the judge will run, as far as it is known without torch."""
    device = device_guess(options.device)
    try:
        plan = sandbox_plan(options, device)
    except SolkitError:
        return None  # the evaluation says why
    work_dir = options.work_dir or tempfile.mkdtemp(prefix="solkit_eval_")
    job = {"solution": solution.model_dump(mode="json"), "device": device, "sandbox_plan": plan,
           "cpu_threads": options.cpu_threads, "method": options.method,
           "interpret_triton": interpret_triton(problem, solution, device)}  # fmt: skip
    cjob, scratch = candidate_job(job, Path(work_dir), 1)
    return Ahead(device, plan, work_dir, spawn_candidate(cjob, scratch, plan))


def interpret_triton(problem: Problem, solution: Solution, device: str) -> bool:
    """On a CPU, Triton runs through its interpreter: whether solkit sets TRITON_INTERPRET=1 for this evaluation's
    reference and candidate processes (the user did not set it, and the reference or the solution uses Triton)."""
    return device == "cpu" and _uses_triton(problem, solution) and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def solution_for(problem: Problem, solution_path: str | Path | None) -> tuple[Solution, str | None]:
    """The solution to evaluate (a solution.json, a ``.py`` with ``run``, or None for the reference) and a note.

    A solution naming another definition is refused, unless it lives in the problem's own directory: SOL-ExecBench
    never compares the names, and its samples rely on that (triton_ref_vecadd's solution names ``vecadd``)."""
    if solution_path is None:
        return reference_solution(problem), None
    path = Path(solution_path)
    if path.suffix == ".py":
        return solution_from_python(path, problem.definition), None
    solution = load_solution(path)
    if solution.definition == problem.name:
        return solution, None
    inside = problem.root is not None and path.resolve().parent == problem.root.resolve()
    if not inside:
        raise SolkitError(f"{solution_path}: definition {solution.definition!r} does not match the problem's "
                          f"{problem.name!r}")  # fmt: skip
    return solution, (f"{path.name} names definition {solution.definition!r}, not {problem.name!r}; evaluated "
                      "against its own directory's problem, as SOL-ExecBench does")  # fmt: skip


#: The options the reference and candidate processes read from the job file as given.
JOB_OPTIONS = ("run_timeout", "trials", "reps", "timing_trials", "warmup", "method", "pool", "matched_ratio",
               "precision_check", "benchmark_reference", "cpu_timing_budget_s", "gpu_timing_budget_s", "min_reps",
               "cpu_threads", "l2_flush", "prewarm_s", "cooldown_ms")  # fmt: skip


def evaluate_loaded(problem: Problem, solution: Solution, options: EvalOptions, ahead: Ahead | None = None,
                    lookahead=None, fill_between: bool = False):  # fmt: skip
    """The traces of ``solution`` on ``problem``; ``ahead``: its candidate process, started already; ``lookahead``
    (see :func:`evaluate`) is filled after the reference when ``fill_between``, and is ready before the first call."""
    judge_t0 = options.extra.pop("judge_t0", None) or time.perf_counter()
    from solkit.harness.runner import RunnerOptions, run_solution

    device = options.resolved_device()
    workloads = _workloads(problem, options)
    if options.trials < 1 or options.reps < 1 or options.timing_trials < 1:
        raise SolkitError("--trials, --reps and --timing-trials must be at least 1")
    plan = ahead.plan if ahead is not None and ahead.device == device else sandbox_plan(options, device)
    salt = secrets.randbits(62) if options.secret_seed else None
    seed = options.seed
    if salt is not None:
        seed = int.from_bytes(hashlib.sha256(f"{options.seed}|{salt}".encode()).digest()[:8], "little") >> 1
    work_dir = options.work_dir or (ahead.work_dir if ahead is not None else tempfile.mkdtemp(prefix="solkit_eval_"))
    notes = dict(options.extra.get("notes") or {})
    interpret = interpret_triton(problem, solution, device)
    if interpret:
        notes["triton"] = TRITON_CPU_NOTE
        log.warning("%s", TRITON_CPU_NOTE)
    job = {
        "problem": str(problem.definition_path),
        "workload_file": str(problem.workload_path) if problem.workload_path else None,
        "solution": solution.model_dump(mode="json"),
        "device": device,
        "seed": seed,
        "sandbox_plan": plan,
        "workloads": [w.uuid for w in workloads],
        "work_dir": work_dir,
        "interpret_triton": interpret,
        **{k: getattr(options, k) for k in JOB_OPTIONS},
    }
    runner = RunnerOptions(
        compile_timeout=options.compile_timeout,
        run_timeout=options.run_timeout,
        use_fork_server=options.use_fork_server,
    )
    judge_s, judge_ready = time.perf_counter() - judge_t0, time.time()
    sols: dict[str, tuple[dict | None, str | None]] = {}
    threads: list[threading.Thread] = []

    def analyse(env: dict) -> None:
        for w in workloads:
            sols[w.uuid] = _sol_cached(problem, w, env, options.sol_basis)

    def on_env(env: dict) -> None:  # the reference process runs: the judge, otherwise idle, works out SOL meanwhile
        threads.append(threading.Thread(target=analyse, args=(env,), name="solkit-sol", daemon=True))
        threads[0].start()

    def between(env: dict) -> None:  # before the candidate runs anything: the analysis is done
        nonlocal judge_s
        t = time.perf_counter()
        if threads:
            threads[0].join()
        else:
            analyse(env)
        judge_s += time.perf_counter() - t
        if lookahead is not None and fill_between:  # after the reference's own timing; ready before the first call
            t = time.perf_counter()
            lookahead.fill()
            phases = env.setdefault("phases", {})
            phases["lookahead"] = phases.get("lookahead", 0.0) + time.perf_counter() - t

    try:
        spawned = ahead.spawned if ahead is not None else None
        ready = lookahead.settle if lookahead is not None else None
        env, results = run_solution(job, runner, spawned, between, on_env, ready)
    finally:
        if not options.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    run_phases = {"launch": options.extra.get("launch_s"), "load": options.extra.get("load_s"), "judge": judge_s,
                  **(env.get("phases") or {})}  # fmt: skip
    line = timeline({**(env.get("timeline") or {}), "judge.ready": judge_ready}, options.extra.get("started_at"))
    for res in results.values():
        res["seed_salt"] = salt
        phases = phase_record(run_phases, res.get("phases") or {}, len(workloads))
        res["notes"] = {**notes, "phases_s": {**phases, "timeline": line}}
    return [build_trace(problem, solution, w, results[w.uuid], env, options, device, sols.get(w.uuid))
            for w in workloads]  # fmt: skip


TRITON_CPU_NOTE = (
    "Triton ran through its interpreter on the CPU (TRITON_INTERPRET=1 set by solkit): results are checked, "
    "times are the interpreter's"
)


def _uses_triton(problem: Problem, solution: Solution) -> bool:
    langs = {lang.value for lang in solution.spec.languages}
    return (
        "triton" in langs
        or "triton" in problem.definition.reference
        or any("triton" in src.content for src in solution.sources)
    )


def sandbox_plan(options: EvalOptions, device: str) -> dict[str, Any]:
    """The containment the candidate will run under (see solkit.harness.sandbox); refuses when required and absent."""
    if options.sandbox not in ("auto", "require", "off"):
        raise SolkitError(f"sandbox {options.sandbox!r}: allowed values are auto, require, off")
    if options.sandbox == "off":
        return {"enabled": False}
    from solkit.harness import sandbox

    plan = {**sandbox.probe(), "enabled": True}
    if device == "cpu":
        with contextlib.suppress(ValueError, OSError, AttributeError):
            plan["address_space"] = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    if options.sandbox == "require" and not (plan["namespaces"] and plan["landlock_abi"] > 0):
        missing = [n for n, ok in (("PID/network namespaces (unshare)", plan["namespaces"]),
                                   ("Landlock", plan["landlock_abi"] > 0)) if not ok]  # fmt: skip
        raise SolkitError(f"--require-sandbox: this machine lacks {' and '.join(missing)}; refusing to run")
    return plan


def build_trace(problem, solution, workload, res: dict, env: dict, options: EvalOptions, device: str,
                sol: tuple[dict | None, str | None] | None = None) -> Trace:  # fmt: skip
    """One workload's trace; ``sol``: its :func:`sol_for`, when the judge worked it out already."""
    status = res.get("status", "RUNTIME_ERROR")
    perf = dict(res.get("performance") or {})
    timing = perf.get("timing") or {}
    telemetry = timing.pop("telemetry", None) if isinstance(timing, dict) else None
    environment = Environment(
        hardware=env.get("hardware") or device,
        libs={k: str(v) for k, v in (env.get("libs") or {}).items()},
        device=env.get("device"),
        telemetry=telemetry,
        seed=options.seed,
        timing_method=res.get("timing_method"),
    )
    notes: dict[str, Any] = {"device": device, "solkit_status_reason": res.get("log", "")[:500] or None,
                             "containment": res.get("containment")}  # fmt: skip
    notes.update(res.get("notes") or {})
    if res.get("seed_salt") is not None:
        notes["inputs"] = f"seed {options.seed} salted with this run's secret {res['seed_salt']:#x}"
    correctness = performance = None
    if status in ("PASSED", "INCORRECT_NUMERICAL"):
        c = res.get("correctness") or {}
        correctness = Correctness(
            max_relative_error=c.get("max_relative_error") or 0.0,
            max_absolute_error=c.get("max_absolute_error") or 0.0,
            has_nan=bool(c.get("has_nan")),
            has_inf=bool(c.get("has_inf")),
            extra=c.get("extra") or {k: v for k, v in c.items() if k not in ("ok", "status", "reason")} or None,
        )
    if status == "PASSED":
        performance = Performance(**perf)
        sol, note = sol if sol is not None else sol_for(problem, workload, env, options.sol_basis)
        if sol is not None:
            _attach_sol(performance, sol)
        elif note:
            notes["sol"] = note
        if performance.sol_violation:
            notes["warning"] = (
                f"measured {performance.latency_ms:.4g} ms is below T_SOL {performance.t_sol_ms:.4g} ms: "
                "a timing or model error; SOL fraction capped at 1"
            )
        if timing.get("high_variance"):
            notes["timing_warning"] = f"coefficient of variation {timing.get('cv', 0):.1%} > 5%"
    evaluation = Evaluation(
        status=status,
        environment=environment,
        timestamp=_now(),
        log=res.get("log", "") or "",
        correctness=correctness,
        performance=performance,
        solkit={k: v for k, v in notes.items() if v is not None},
    )
    return Trace(definition=problem.name, workload=workload, solution=solution.name, evaluation=evaluation)


def _attach_sol(perf: Performance, sol: dict[str, Any]) -> None:
    from solkit.sol.model import anchored_score, sol_fraction

    t_sol_s = sol["t_sol_s"]
    perf.t_sol_ms = t_sol_s * 1e3
    if perf.latency_ms > 0:
        score = sol_fraction(t_sol_s, perf.latency_ms / 1e3)
        perf.sol_fraction = score.sol_fraction
        perf.sol_violation = score.violation
        if perf.reference_latency_ms > 0:
            s = anchored_score(perf.latency_ms / 1e3, perf.reference_latency_ms / 1e3, t_sol_s)
            perf.anchored_score = s if s == s else None
            sol["anchored_baseline"] = "reference, as measured in this run"
    perf.sol = sol


#: SOL per (definition file and content, workload, device, basis) in this process: shared by the solutions of a
#: problem in a suite.
_SOL_CACHE: dict[str, tuple[dict | None, str | None]] = {}


def _sol_cached(problem: Problem, workload: Workload, env: dict, basis: str) -> tuple[dict | None, str | None]:
    """:func:`sol_for`, computed once per definition, workload, device record and basis (a copy each time: the trace
    adds to it)."""
    arch = (env.get("device") or {}).get("arch_id")
    parts = (str(problem.definition_path), problem.definition.model_dump_json(), workload.model_dump_json(), str(arch),
             basis)  # fmt: skip
    key = hashlib.sha256("|".join(parts).encode()).hexdigest()
    if not arch:  # nothing to compute (no datasheet record): sol_for says so at once
        return sol_for(problem, workload, env, basis)
    if key not in _SOL_CACHE:
        _SOL_CACHE[key] = sol_for(problem, workload, env, basis)
    sol, why = _SOL_CACHE[key]
    return copy.deepcopy(sol), why


def sol_for(problem: Problem, workload: Workload, env: dict, basis: str) -> tuple[dict | None, str | None]:
    """T_SOL for one workload: (dict with t_sol_s and its terms, None) or (None, why it was skipped).

    Work comes from :func:`solkit.sol.analysis.analyze_workload` (the reference traced on meta tensors,
    the definition's declared ``"solkit"`` counts winning), or, if that is unavailable or fails, from the
    declared counts alone. Ceilings: the datasheet record of the device the worker ran on.
    """
    arch = (env.get("device") or {}).get("arch_id")
    if not arch:
        return None, "SOL skipped: no datasheet record for this device (CPU or unknown GPU)"
    try:
        from solkit.sol.ceilings import get_ceilings
        from solkit.sol.model import t_sol

        ceilings = get_ceilings(arch, basis="spec") if basis == "spec" else get_ceilings(None, basis=basis)
    except Exception as exc:  # noqa: BLE001 - missing ceilings are reported, not fatal
        return None, f"SOL skipped: no ceilings for {arch}: {type(exc).__name__}: {str(exc)[:160]}"
    why = ""
    try:
        from solkit.sol.analysis import analyze_workload

        wa = analyze_workload(problem, workload, ceilings=ceilings)
        a = wa.analysis
        d = a.t_sol(ceilings).to_dict()
        d["source"] = "solkit.sol.analysis" + (" (declared counts)" if a.declared else " (traced reference)")
        d["precision"] = a.precision  # the basis matrix work was charged on (solkit.sol.precision)
        if a.uncounted:
            d["uncounted_ops"] = list(a.uncounted)
        if a.disagreements:
            d["disagreements"] = list(a.disagreements)
        return d, None
    except Exception as exc:  # noqa: BLE001 - fall back to the declared formulas
        why = f"analysis unavailable ({type(exc).__name__}: {str(exc)[:120]})"
    hints = problem.definition.solkit
    if hints is None or not hints.bytes:
        return None, f"SOL skipped: {why}; the definition declares no solkit.flops/bytes"
    env_vars = {**problem.resolve_axes(workload), **problem.scalar_values(workload)}
    try:
        flops = {u: float(eval_expr(e, env_vars)) for u, e in hints.flops.items()}
        res = t_sol(flops, float(eval_expr(hints.bytes, env_vars)), ceilings)
    except Exception as exc:  # noqa: BLE001 - bad formulas or units are reported
        return None, f"SOL skipped: {problem.definition_path}: solkit formulas: {exc}"
    d = res.to_dict()
    d["source"] = f"definition formulas (solkit.flops / solkit.bytes); {why}"
    return d, None


def traces_to_jsonl(traces: list[Trace]) -> str:
    import json

    return "".join(json.dumps(t.model_dump(mode="json"), allow_nan=False) + "\n" for t in traces)


def summarize(traces: list[Trace]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for t in traces:
        s = t.evaluation.status.value if t.evaluation else "NONE"
        counts[s] = counts.get(s, 0) + 1
    return {
        "traces": len(traces),
        "by_status": counts,
        "all_passed": bool(traces) and counts.get("PASSED", 0) == len(traces),
    }


__all__ = ["EvalOptions", "evaluate", "evaluate_loaded", "reference_solution", "build_trace", "summarize", "asdict"]
