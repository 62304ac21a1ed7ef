"""``solkit eval-suite --devices ... | --ray ...``: the suite's evaluations spread over a pool of devices.

One item per (problem, solution): the judge's reference process and its contained candidate process run
inside the worker exactly as in a serial run, on the worker's device (the worker only drives them), and
each starts once per solution, not once per workload. A worker hands back the traces as JSON; the command
writes each problem's traces file once all of its solutions are back, in the serial run's order.

Every trace carries the identity of the card it was measured on (``evaluation.solkit.device_uuid`` and
``device_name``), in a serial run too, so traces are only ever compared within one card.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.harness.evaluate import EvalOptions, evaluate
from solkit.problems.schema import Trace
from solkit.scale import Call, Item, cpu_identity, pack, unpacked, worker_state


def stamp_device(traces: list[Trace]) -> list[Trace]:
    """Write the measuring device's UUID and name into each trace (the GPU's UUID, else this CPU's stable id)."""
    for t in traces:
        dev = t.evaluation.environment.device or {}
        if dev.get("kind") == "cuda" and dev.get("uuid"):
            uuid = str(dev["uuid"])
            ident = {"uuid": uuid if uuid.startswith("GPU-") else f"GPU-{uuid}", "name": dev.get("name")}
        else:
            ident = cpu_identity()
        t.evaluation.solkit = {**(t.evaluation.solkit or {}), "device_uuid": ident["uuid"],
                               "device_name": ident["name"]}  # fmt: skip
    return traces


def evaluate_problem(problem: Path, solutions: list[str], options: EvalOptions, lookahead=None
                     ) -> tuple[list[Trace], list[str]]:  # fmt: skip
    """Every solution (file names in ``problem``; none: the reference) evaluated in turn: (traces, errors);
    ``lookahead``: a serial suite's :class:`solkit.harness.lookahead.Lookahead`."""
    traces: list[Trace] = []
    errors: list[str] = []
    for name in solutions or [None]:
        try:
            traces += evaluate(problem, problem / name if name else None, options, lookahead=lookahead)
        except SolkitError as exc:
            errors.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - one broken problem never stops the suite
            errors.append(f"{type(exc).__name__}: {exc}")
    return stamp_device(traces), errors


def eval_item(problem_src, solution: str | None, options: EvalOptions) -> dict[str, Any]:
    """One solution of one problem on this worker's device: its traces as JSON, and any error."""
    state = worker_state()
    if state is not None:
        options = dataclasses.replace(options, device=state.device)
    where = unpacked(problem_src)
    traces, errors = evaluate_problem(where, [solution] if solution else [], options)
    return {"traces": [t.model_dump(mode="json") for t in traces], "errors": errors, "dir": str(where)}


def run_pooled(pool, todo: list[tuple[str, Path, list[str]]], options: EvalOptions
               ) -> Iterator[tuple[str, list[Trace], list[str]]]:  # fmt: skip
    """``todo``: (key, problem dir, solution names) per problem. Yields (key, traces, errors) per problem as its
    last solution comes back, its traces in the order of its solutions (as a serial run has them)."""
    items, owner, dirs = [], [], {}
    for key, problem, solutions in todo:
        dirs[key] = str(problem)
        src = pack(problem) if pool.kind == "ray" else str(problem)
        for name in solutions or [None]:
            items.append(Item((key, name or "reference"), Call(eval_item, (src, name, options))))
            owner.append(key)
    left = {key: len(solutions or [None]) for key, _, solutions in todo}
    got: dict[int, dict[str, Any]] = {}
    for out in pool.map_unordered(items):
        key = owner[out.index]
        got[out.index] = (
            _here(out.value, dirs[key]) if out.ok else {"traces": [], "errors": [f"lost to its worker: {out.error}"]}
        )
        left[key] -= 1
        if left[key]:
            continue
        traces, errors = [], []
        for i in (i for i, k in enumerate(owner) if k == key):
            traces += [Trace.model_validate(t) for t in got[i]["traces"]]
            errors += got[i]["errors"]
        yield key, traces, errors


def _here(value: dict[str, Any], problem: str) -> dict[str, Any]:
    """A worker's reply with the directory its bundle was unpacked to named as the caller's problem directory
    (error messages and logs then read as in a serial run)."""
    there = value.get("dir")
    if not there or there == problem:
        return value
    return json.loads(json.dumps(value).replace(json.dumps(there)[1:-1], json.dumps(problem)[1:-1]))
