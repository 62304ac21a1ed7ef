"""SOL-ExecBench-compatible problem files: schemas (:mod:`.schema`), loading (:mod:`.loader`),
safe axis expressions (:mod:`.expr`). See :mod:`solkit.problems.loader` for the stable API.

The loader's names are imported on first use (PEP 562): ``solkit sol`` needs only :mod:`.expr`, and importing it
must not build the pydantic schemas (a tenth of a second of every light command's start-up)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Problem", "load_definition", "load_problem", "load_reference", "load_solution", "load_workloads"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("solkit.problems.loader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
