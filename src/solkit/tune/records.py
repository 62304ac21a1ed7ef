"""The tuner's records: what a problem is, how another process rebuilds it, what one config's evaluation found."""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from solkit.tune.space import Config

STATUSES = (
    "ok", "pruned", "compile_error", "out_of_resources", "compile_timeout", "worker_crash",
    "illegal_address", "timeout", "runtime_error", "wrong_result", "aborted",
)  # fmt: skip


@dataclass(frozen=True)
class CompileJob:
    """What a worker needs to compile one config: ``module.attr`` is the ``@triton.jit`` function.

    ``args`` mirror the launch arguments with a ``torch.dtype`` in place of each tensor (Triton's
    ``warmup`` treats those as aligned tensors) and the real integer values (Triton specialises on
    ``== 1`` and divisibility by 16, so they must match the launch for the cache to hit).
    """

    module: str
    attr: str
    args: tuple
    kwargs: dict


@dataclass(frozen=True)
class ProblemRef:
    """How another process rebuilds a :class:`TuneProblem`: ``module.factory(*args, **kwargs)``
    (``module`` may be a ``.py`` file path). Needed for isolated benchmarking."""

    module: str
    factory: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def build(self) -> TuneProblem:
        return getattr(import_module_or_file(self.module), self.factory)(*self.args, **self.kwargs)


@dataclass
class TuneProblem:
    """A kernel at one shape: how to build inputs, launch a config, and check its output."""

    name: str
    make_inputs: Callable[[int], tuple]
    run: Callable[[Config, tuple], torch.Tensor]
    reference: Callable[[tuple], torch.Tensor]
    same_dtype: Callable[[tuple], torch.Tensor] | None = None
    #: index (or indices) of the output tensor(s) in the inputs, poisoned with NaN before the check
    output_index: int | Sequence[int] | None = None
    #: build fresh check inputs for every config (kernels that update their inputs in place)
    fresh_check_inputs: bool = False
    compile_job: Callable[[Config], CompileJob] | None = None
    rel_tol: float = 2e-3
    #: set when the problem can be rebuilt in another process (isolated benchmarking)
    ref: ProblemRef | None = None
    flops: float = 0.0
    bytes_moved: float = 0.0
    meta: dict = field(default_factory=dict)


@dataclass
class ConfigEvaluation:
    """The record of one config's evaluation (JSON-ready through :meth:`to_dict`)."""

    config: Config
    status: str
    time_ms: float | None = None
    compile_s: float | None = None
    bench_s: float | None = None
    n_regs: int | None = None
    n_spills: int | None = None
    shared: int | None = None
    error: str | None = None
    max_err: float | None = None
    tol: float | None = None
    timing: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.time_ms is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # JSON has no inf/NaN: a non-finite error (NaN output) is kept in ``error`` text only
        return {k: v for k, v in d.items() if v is not None and not (isinstance(v, float) and not math.isfinite(v))}


@dataclass
class BenchSettings:
    reps: int = 20
    trials: int = 2
    warmup: int = 2
    screen_reps: int = 3
    #: a config whose quick screen is slower than this multiple of the best so far is not timed further
    screen_factor: float = 2.5
    method: str = "auto"
    input_sets: int = 2
    #: wall seconds after which one launch counts as hung
    run_timeout_s: float = 10.0
    #: isolated benchmarking: extra seconds a child gets per config beyond 3 x run_timeout_s
    isolate_slack_s: float = 30.0


def import_module_or_file(module: str):
    """Import ``module`` by name, or from a file path ending in ``.py`` (no dependence on sys.path)."""
    if not module.endswith(".py"):
        return importlib.import_module(module)

    name = "solkit_tune_ext_" + str(abs(hash(module)) % 10**10)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, module)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {module}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def classify_exception(exc: BaseException) -> str:
    """Map a Triton/CUDA exception to an evaluation status."""
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfResources" or "out of resource" in text:
        return "out_of_resources"
    if "illegal memory access" in text or "illegal address" in text or "misaligned address" in text:
        return "illegal_address"
    if name in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError") or "ptxas" in text:
        return "compile_error"
    if "timed out" in text or "timeout" in name.lower():
        return "timeout"
    return "runtime_error"
