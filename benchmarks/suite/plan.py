"""A plan: one YAML file per topic, validated field by field (an error names the file and the field).

topic: norms                     # results go to benchmarks/results/<topic>/
description: what the plan measures, in a sentence
backs: [docs/kernels/norms.md]   # the docs pages its numbers serve (optional)
timing: {reps: 50, trials: 3, warmup: 5, flush_l2: true, method: auto, rotating: 2}   # optional
defaults: {dtypes: [bf16], directions: [fwd, fwd_bwd], impls: [solkit, torch, compile, liger, copy]}
cpu: {dtypes: [fp32]}            # on the interpreter (no GPU): these dtypes, the cases' small shapes
cases:
  - op: rmsnorm                  # an op of suite.registry.OPS
    shapes: [[8192, 8192]]       # the op's dims (registry: Op.dims)
    small: [[4, 256]]            # the shapes of --size s and of a CPU run
    dtypes / directions / impls: override the defaults
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from suite.registry import DIRECTIONS, DTYPES, IMPLS, OPS

TOP = {"topic", "description", "backs", "timing", "defaults", "cpu", "cases"}
TIMING = {"reps": int, "trials": int, "warmup": int, "flush_l2": bool, "method": str, "rotating": int}
CASE = {"op", "name", "shapes", "small", "dtypes", "directions", "impls"}
LISTS = {"dtypes": DTYPES, "directions": DIRECTIONS, "impls": IMPLS}


class PlanError(Exception):
    """A plan that cannot run: the message is one line naming the file and the field."""


@dataclass
class Case:
    op: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    direction: str
    impls: list[str]


@dataclass
class Plan:
    path: Path
    data: dict[str, Any]

    @property
    def topic(self) -> str:
        return self.data["topic"]

    def timing(self, cpu: bool) -> dict[str, Any]:
        """The plan's timing settings; on the interpreter a few wall-clock calls (it checks logic, not speed)."""
        base = {"reps": 50, "trials": 3, "warmup": 5, "flush_l2": True, "method": "auto", "rotating": 2}
        return {**base, **self.data.get("timing", {}), **({"reps": 3, "trials": 1, "warmup": 1} if cpu else {})}

    def cases(self, small: bool, cpu: bool) -> list[Case]:
        """Every (op, shape, dtype, direction) of the plan; ``small``: the cases' small shapes."""
        defaults = self.data.get("defaults", {})
        out = []
        for i, c in enumerate(self.data["cases"]):
            get = lambda key, c=c: c.get(key, defaults.get(key))  # noqa: E731
            dtypes = self.data.get("cpu", {}).get("dtypes", ["fp32"]) if cpu else get("dtypes") or ["bf16"]
            directions = get("directions") or ["fwd"]
            impls = get("impls") or list(IMPLS)
            shapes = c.get("small") if small else c["shapes"]
            if not shapes:
                raise PlanError(f"{self.path}: cases[{i}].small: needed for --size s and CPU runs")
            for shape in shapes:
                for dt in dtypes:
                    for d in directions:
                        if d == "fwd_bwd" and OPS[c["op"]].bytes_bwd is None:
                            continue  # validated: only where the plan's defaults asked for it
                        out.append(Case(c["op"], c.get("name", c["op"]), tuple(shape), dt, d, list(impls)))
        return out


def _fail(path: Path, field: str, msg: str) -> None:
    raise PlanError(f"{path}: {field}: {msg}")


def _check_list(path: Path, field: str, value: Any, allowed) -> None:
    if not isinstance(value, list) or not value:
        _fail(path, field, "must be a non-empty list")
    for v in value:
        if v not in allowed:
            _fail(path, field, f"unknown value {v!r}; allowed: {', '.join(allowed)}")


def _check_shapes(path: Path, field: str, value: Any, arity: int, dims: str) -> None:
    if not isinstance(value, list) or not value:
        _fail(path, field, "must be a non-empty list of shapes")
    for s in value:
        if not (isinstance(s, list) and len(s) == arity and all(isinstance(n, int) and n > 0 for n in s)):
            _fail(path, field, f"shape {s!r} must be {arity} positive integers ({dims})")


def _check_case(path: Path, i: int, c: Any, defaults: dict) -> None:
    where = f"cases[{i}]"
    if not isinstance(c, dict):
        _fail(path, where, "must be a mapping")
    for key in c:
        if key not in CASE:
            _fail(path, f"{where}.{key}", f"unknown field; allowed: {', '.join(sorted(CASE))}")
    if c.get("op") not in OPS:
        _fail(path, f"{where}.op", f"unknown op {c.get('op')!r}; allowed: {', '.join(OPS)}")
    op = OPS[c["op"]]
    arity = len(op.dims.split(","))
    _check_shapes(path, f"{where}.shapes", c.get("shapes"), arity, op.dims)
    if "small" in c:
        _check_shapes(path, f"{where}.small", c["small"], arity, op.dims)
    for key, allowed in LISTS.items():
        if key in c:
            _check_list(path, f"{where}.{key}", c[key], allowed)
    if op.bytes_bwd is None and "fwd_bwd" in c.get("directions", []):
        _fail(path, f"{where}.directions", f"op {op.name} has no backward")


def load(path: str | Path) -> Plan:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark else "yaml"
        raise PlanError(f"{path}: {line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        _fail(path, "(top)", "a plan is a mapping")
    for key in data:
        if key not in TOP:
            _fail(path, key, f"unknown field; allowed: {', '.join(sorted(TOP))}")
    for key in ("topic", "description"):
        if not isinstance(data.get(key), str) or not data[key]:
            _fail(path, key, "required (a string)")
    for key, value in data.get("timing", {}).items():
        if key not in TIMING:
            _fail(path, f"timing.{key}", f"unknown field; allowed: {', '.join(TIMING)}")
        if not isinstance(value, TIMING[key]):
            _fail(path, f"timing.{key}", f"must be {TIMING[key].__name__}")
    for section in ("defaults", "cpu"):
        for key, value in data.get(section, {}).items():
            if key not in LISTS or (section == "cpu" and key != "dtypes"):
                _fail(path, f"{section}.{key}", "unknown field")
            _check_list(path, f"{section}.{key}", value, LISTS[key])
    if not isinstance(data.get("cases"), list) or not data["cases"]:
        _fail(path, "cases", "required (a non-empty list)")
    for i, c in enumerate(data["cases"]):
        _check_case(path, i, c, data.get("defaults", {}))
    return Plan(path, data)
