"""The model jobs' summaries share one loop: each named run's ``results.json`` under the job's folder goes to the
job's own printer; a run that wrote none, or whose summary fails, is one line, and the others go on.

A job's summary (a heredoc run from the repository root) imports it with
``sys.path.insert(0, "benchmarks/gpu_jobs"); from model_runs import job_summary, each_results``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def job_summary(job: str, **extra: Any) -> dict[str, Any]:
    """The summary's head: the job, the tree's commit (the device copy's, see the results READMEs), its runs."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"job": job, "commit": commit or "unknown", "runs": {}, **extra}


def each_results(out: Path, runs: Iterable[str], one_run: Callable[[str, dict[str, Any]], None]) -> None:
    """``one_run(run, results)`` for every run of ``runs`` that wrote ``out/run/results.json``."""
    for run in runs:
        f = out / run / "results.json"
        if not f.exists():
            err = out / run / "stderr.txt"
            print(f"{run}: no results ({err.read_text()[-300:] if err.exists() else 'not run'})")
            continue
        try:
            one_run(run, json.loads(f.read_text()))
        except Exception as exc:  # noqa: BLE001 - one bad file does not stop the summary
            print(f"{run}: summary failed: {type(exc).__name__}: {exc}")
