"""solkit.tune: search-based autotuning of Triton kernels.

* :class:`Space` — declarative search spaces with constraints and a shared-memory pre-filter;
* :func:`tune` — live tuning of a :class:`TuneProblem` (parallel compile, serial benchmark, correctness gate);
* :func:`autotune` — a drop-in ``@triton.autotune`` replacement with ``space=`` and ``budget=``;
* :class:`TuneCache` — the persistent cache of every measured config;
* :mod:`solkit.tune.replay` — strategies replayed on recorded sweeps (no GPU).

Submodules that import torch/triton are loaded lazily, so ``import solkit.tune`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from solkit.tune.space import Space, config_key

__all__ = ["Space", "config_key", "tune", "autotune", "TuneCache", "TuneProblem", "CompileJob", "BenchSettings"]

_LAZY = {
    "tune": ("solkit.tune.tuner", "tune"),
    "autotune": ("solkit.tune.decorator", "autotune"),
    "TuneCache": ("solkit.tune.cache", "TuneCache"),
    "TuneProblem": ("solkit.tune.records", "TuneProblem"),
    "CompileJob": ("solkit.tune.records", "CompileJob"),
    "BenchSettings": ("solkit.tune.records", "BenchSettings"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'solkit.tune' has no attribute {name!r}")
