"""The diagnosis column of ``solkit bench --profile``.

The bench has its own T_measured for each (problem, solution, workload); these functions profile
those targets under ncu in **one** subprocess (one ncu start-up for the whole batch), diagnose each
with the bench's time, and return one compact dict per item, in order. Nothing here raises for
profiler trouble: ``degraded`` says what was missing and ``summary`` still carries the SOL fraction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solkit.profile.runner import plan_targets, profile, solution_tag

_RANK = {"high": 0, "medium": 1, "info": 2}


def _target_for(item: dict[str, Any]) -> dict[str, Any]:
    problem_dir, solution, workload = item["problem_dir"], item.get("solution"), item.get("workload")
    reference = plan_targets([problem_dir], None, workload)[0]
    if solution is None:
        return reference
    name = reference["label"].rsplit(".", 1)[0]
    tag = solution_tag(Path(str(solution)), name)
    return {
        "label": f"{name}.{tag}",
        "problem_dir": str(problem_dir),
        "workload": workload,
        "solution": str(solution),
    }


def diagnose_batch_for_bench(
    items: list[dict[str, Any]], *, out_dir: str | Path | None = None, timeout_s: float = 900
) -> list[dict[str, Any]]:
    """``items``: dicts with ``problem_dir`` and optional ``solution`` (None: the reference; a
    solution.json or .py; or ``"bench:<backend>"`` for a ``solkit bench`` backend such as
    ``"bench:solkit"``), ``workload`` (uuid or prefix) and ``t_measured_ms`` (the bench's median;
    None: time it here).

    Returns, per item: ``{"label", "summary", "sol_fraction", "tier", "roof", "dram_vs_model",
    "n_kernels", "findings" (five most severe), "degraded", "report" (that target's full entry)}``.
    """
    targets = []
    seen: dict[str, int] = {}
    for item in items:
        t = _target_for(item)
        if t["label"] in seen:  # the same code on another workload: keep labels (NVTX ranges) unique
            seen[t["label"]] += 1
            t["label"] = f"{t['label']}.{seen[t['label']]}"
        else:
            seen[t["label"]] = 0
        targets.append(t)
    given = {t["label"]: item["t_measured_ms"] for t, item in zip(targets, items) if item.get("t_measured_ms")}
    report = profile(
        [],
        targets=targets,
        out_dir=out_dir,
        timeout_s=timeout_s,
        timing=len(given) < len(targets),
        t_measured_ms=given or None,
    )
    by_label = {t["label"]: t for t in report["targets"]}
    return [_compact(by_label[t["label"]], report["degraded"]) for t in targets]


def diagnose_for_bench(
    problem_dir: str | Path,
    *,
    solution: str | Path | None = None,
    workload: str | None = None,
    t_measured_ms: float | None = None,
    out_dir: str | Path | None = None,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """One item of :func:`diagnose_batch_for_bench` (the solution, or the reference when None)."""
    item = {"problem_dir": problem_dir, "solution": solution, "workload": workload, "t_measured_ms": t_measured_ms}
    return diagnose_batch_for_bench([item], out_dir=out_dir, timeout_s=timeout_s)[0]


def _compact(t: dict[str, Any], degraded: list[str]) -> dict[str, Any]:
    d = t["diagnosis"]
    sol = d.get("sol") or {}
    findings = list(d["findings"]) + [f for k in d["kernels"] for f in k["findings"]]
    findings.sort(key=lambda f: _RANK.get(f["severity"], 3))
    summary = d["summary"] if t.get("ok") else f"failed: {t.get('error')}"
    if degraded and not d["kernels"]:
        summary = f"{summary}; {degraded[0].split(':')[0]}"
    return {
        "label": t["label"],
        "summary": summary,
        "sol_fraction": sol.get("sol_fraction"),
        "tier": (sol.get("tier") or {}).get("label"),
        "roof": (d.get("dominant_kernel") or {}).get("roof"),
        "dram_vs_model": d.get("dram_vs_model"),
        "n_kernels": d["n_kernels"],
        "findings": findings[:5],
        "degraded": degraded,
        "report": t,
    }
