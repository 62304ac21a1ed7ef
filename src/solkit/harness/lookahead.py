"""Candidate processes started ahead for the next evaluations of a serial ``solkit eval-suite``.

A candidate process's start-up (Python, torch; on a GPU also ``torch._dynamo`` before its identity snapshot, and
CUDA) is the longest step of a small problem's evaluation, and it cannot be shared: every solution gets a fresh,
contained process (:mod:`.sandbox`). So a serial suite starts the candidate processes of the next ``depth``
evaluations in one batch, and:

* beside the current evaluation's own candidate's start-up when that one was not started ahead (like that start-up,
  beside the reference process's work), otherwise once the current reference (and its own timing) is done;
* it waits until every one of them is ready (its hello written, blocked on its command pipe, idle) before the
  current candidate's first call, so no candidate process is ever starting beside a call, a timing or a clock
  check;
* each is started exactly as its own evaluation would start it (:func:`.evaluate.spawn_ahead`: the same job,
  containment plan and environment, known without torch), and adopted only under the judge's own checks
  (:func:`.spawn.adoptable`); one that does not match is discarded and its evaluation starts its own.

Its solution is imported only by its own evaluation's ``load`` command, after that evaluation's ground truth files
are gone, as without the lookahead. The batch's start-ups are paid once per ``depth`` evaluations instead of once
per evaluation; the wait is the trace's ``lookahead`` phase.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import time
from pathlib import Path

from solkit.harness.evaluate import EvalOptions, solution_for, spawn_ahead
from solkit.harness.spawn import Ahead, ready
from solkit.problems.loader import load_problem

log = logging.getLogger(__name__)
#: At most this many candidate processes wait ahead (each holds a Python with torch, on a GPU a CUDA context).
MAX_DEPTH = 4


def auto_depth() -> int:
    """How many evaluations ahead a serial suite starts candidates by default. A start-up is mostly one core's imports,
    and the current evaluation keeps about four busy (the judge, the reference, its candidate, the fork server): the
    batch takes the cores left, two per start-up; below two start-ups it does not pay (one candidate ahead waits as
    long as its own start-up), so on fewer than 8 cores it is off."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    depth = min(MAX_DEPTH, (cores - 4) // 2)
    return depth if depth >= 2 else 0


class Lookahead:
    """The suite's evaluations in order, ``(problem_dir, solution_path or None)``, and the candidates started ahead."""

    def __init__(self, items: list[tuple[Path, Path | None]], options: EvalOptions, depth: int) -> None:
        self.items = [(Path(p), Path(s) if s else None) for p, s in items]
        self.options, self.depth = options, max(int(depth), 0)
        self.started: dict[int, Ahead] = {}
        self.pos = -1  # the evaluation running now
        self.batches = 0

    def take(self, problem_dir, solution_path) -> Ahead | None:
        """The candidate started ahead for this evaluation (None: start its own); it becomes the current one."""
        key = (Path(problem_dir), Path(solution_path) if solution_path else None)
        nxt = next((i for i in range(self.pos + 1, len(self.items)) if self.items[i] == key), None)
        if nxt is None:
            return None
        for i in [i for i in self.started if i < nxt]:  # skipped (their evaluation never ran): not needed now
            self._drop(self.started.pop(i))
        self.pos = nxt
        return self.started.pop(nxt, None)

    def fill(self) -> None:
        """Start the next batch when the evaluation after the current one has no candidate yet."""
        first = self.pos + 1
        if self.depth < 1 or first in self.started or first >= len(self.items):
            return
        self.batches += 1
        for i in range(first, min(first + self.depth, len(self.items))):
            ahead = self._spawn(*self.items[i])
            if ahead is not None:
                self.started[i] = ahead

    def _spawn(self, problem_dir: Path, solution_path: Path | None) -> Ahead | None:
        try:
            problem = load_problem(problem_dir)
            solution, _ = solution_for(problem, solution_path)
            return spawn_ahead(problem, solution, self.options)
        except Exception as exc:  # noqa: BLE001 - its own evaluation reports it; the current one goes on
            log.info("no candidate started ahead for %s: %s", problem_dir, exc)
            return None

    def settle(self, timeout: float = 300.0) -> float:
        """Wait until every candidate started ahead is ready (or gone); returns the seconds waited."""
        t0 = time.perf_counter()
        end = time.monotonic() + timeout
        while waiting := [a.spawned for a in self.started.values() if not ready(a.spawned)]:
            left = end - time.monotonic()
            if left <= 0:  # one that never becomes ready is not kept starting beside the calls
                for i in [i for i, a in self.started.items() if a.spawned in waiting]:
                    self._drop(self.started.pop(i))
                break
            select.select([s.fd for s in waiting], [], [], min(left, 0.05))
        return time.perf_counter() - t0

    def _drop(self, ahead: Ahead) -> None:
        ahead.spawned.discard()
        if not self.options.work_dir:
            shutil.rmtree(ahead.work_dir, ignore_errors=True)

    def close(self) -> None:
        """Discard every candidate still waiting (the suite ended or stopped)."""
        for ahead in self.started.values():
            self._drop(ahead)
        self.started.clear()
