"""The phases of an evaluation's time (docs/sol-execbench.md): per workload, per evaluation, and over a suite."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from solkit.problems.schema import Trace

#: The phases of one workload's evaluation, in the order they run (docs/sol-execbench.md).
WORKLOAD_PHASES = ("reference", "reference_timing", "correctness", "timing", "checks")
#: The timed work: the candidate's timing and the reference's (the speed-up's denominator); every other phase is
#: the judge's overhead.
TIMED_PHASES = ("reference_timing", "timing")
#: Breakdowns of a phase, kept beside the phases (seconds by part; informative, not added to the overhead).
PHASE_PARTS = ("reference_parts", "judge_parts")
#: The one-off phases of an evaluation, shared by its workloads.
RUN_PHASES = ("launch", "load", "judge", "startup", "lookahead", "compile")


def phase_record(run: dict[str, Any], own: dict[str, Any], n_workloads: int) -> dict[str, Any]:
    """Seconds per phase for one workload: its own phases (with their breakdowns), the run's one-off phases, and its
    share of them."""
    mine = {k: round(float(own[k]), 4) for k in WORKLOAD_PHASES if own.get(k) is not None}
    parts = {k: own[k] for k in PHASE_PARTS if isinstance(own.get(k), dict)}
    shared = {k: round(float(run[k]), 4) for k in RUN_PHASES if run.get(k) is not None}
    overhead = sum(shared.values()) / max(n_workloads, 1) + sum(v for k, v in mine.items() if k not in TIMED_PHASES)
    return {**mine, **parts, "run": shared, "overhead_per_workload": round(overhead, 4)}


def suite_time(traces: list[Trace], wall_s: float | None) -> dict[str, Any]:
    """Where a run of several evaluations spent its time: every phase summed (each evaluation's one-off phases once),
    and (wall clock - every timed phase, the candidate's and the reference's timing) / workloads, the figure of the
    "at most 3 s per workload on top of the timed work" goal (docs/sol-execbench.md)."""
    totals = dict.fromkeys((*RUN_PHASES, *WORKLOAD_PHASES), 0.0)
    seen: set[tuple] = set()
    n = 0
    for t in traces:
        rec = (t.evaluation.solkit or {}).get("phases_s") or {}
        if not rec:
            continue
        n += 1
        for k in WORKLOAD_PHASES:
            totals[k] += rec.get(k) or 0.0
        key = (t.definition, t.solution, repr(sorted((rec.get("timeline") or {}).items())))
        if key not in seen:  # the evaluation's one-off phases, shared by its traces
            seen.add(key)
            for k, v in (rec.get("run") or {}).items():
                totals[k] = totals.get(k, 0.0) + (v or 0.0)
    out: dict[str, Any] = {"workloads": n, "evaluations": len(seen),
                           "phases_s": {k: round(v, 3) for k, v in totals.items()}}  # fmt: skip
    if wall_s is not None and n:
        out["wall_s"] = round(wall_s, 3)
        out["overhead_per_workload_wall_s"] = round((wall_s - sum(totals[k] for k in TIMED_PHASES)) / n, 3)
    return out


def timeline(marks: dict[str, float], started_at: float | None) -> dict[str, float]:
    """When each process started and was ready, in seconds from the start of the evaluation (negative: during the
    command's own start-up), and ``judged``, the end of the last verdict: the evaluation's critical path."""
    marks = {k: v for k, v in marks.items() if v is not None}
    zero = started_at if started_at is not None else min(marks.values(), default=time.time())
    out = {k: round(v - zero, 4) for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
    out["judged"] = round(time.time() - zero, 4)
    return out
