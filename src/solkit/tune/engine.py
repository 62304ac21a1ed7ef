"""The evaluation engine: parallel compilation, serial benchmarking, a correctness gate, failure triage.

* **Compilation** runs ahead in worker processes (a ``forkserver`` process pool that preloads torch
  and triton once, so each worker starts in a fraction of a second). A worker calls the kernel's
  ``warmup`` with the config, which compiles into Triton's on-disk cache, then loads the binary
  so that out-of-resources (shared memory, threads) shows up there, with its register and spill
  counts. The main process later launches the kernel and finds the binary in the cache.
* **Benchmarking** is strictly one config at a time, with the harness's timing protocol
  (:func:`solkit.timing.benchmark`: L2 flush, rotating inputs, CUDA graphs for short
  calls); a config far slower than the best so far is only screened with a few repetitions.
* **Correctness gate**: before timing, every config runs once on fresh random inputs with its
  output poisoned (NaN) and is compared with an fp32 reference; the allowed error is twice the
  error of PyTorch's own same-dtype computation plus a small tolerance. A wrong config is recorded
  as ``wrong_result`` and never timed, so it can never win.
* **Triage**: every evaluation is recorded with a status: ``ok``, ``pruned`` (static pre-filter),
  ``compile_error``, ``out_of_resources``, ``compile_timeout``, ``worker_crash``,
  ``illegal_address``, ``timeout``, ``runtime_error``, ``wrong_result``, ``aborted`` (the CUDA
  context was lost earlier in this process, so nothing more can run in it).
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import importlib.util
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from solkit.tune.space import Config, config_key

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
    """How another process rebuilds a :class:`Problem`: ``module.factory(*args, **kwargs)``
    (``module`` may be a ``.py`` file path). Needed for isolated benchmarking."""

    module: str
    factory: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def build(self) -> Problem:
        return getattr(import_module_or_file(self.module), self.factory)(*self.args, **self.kwargs)


@dataclass
class Problem:
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
class Evaluation:
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


# --------------------------------------------------------------------------- compile workers
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


def _resolve_jit(module: str, attr: str):
    obj = getattr(import_module_or_file(module), attr)
    while not hasattr(obj, "warmup") and hasattr(obj, "fn"):  # unwrap autotuners / heuristics
        obj = obj.fn
    return obj


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


def compile_in_worker(job: CompileJob) -> dict[str, Any]:
    """Compile and load one config (runs in a worker process); never raises."""
    t0 = time.perf_counter()
    try:
        fn = _resolve_jit(job.module, job.attr)
        kernel = fn.warmup(*job.args, grid=(1,), **job.kwargs)
        if kernel is None:
            raise RuntimeError("warmup returned no kernel (asynchronous compile mode?)")
        kernel._init_handles()  # loads the binary: raises OutOfResources on shared memory / threads
        return {
            "status": "ok",
            "compile_s": time.perf_counter() - t0,
            "n_regs": int(getattr(kernel, "n_regs", -1)),
            "n_spills": int(getattr(kernel, "n_spills", -1)),
            "shared": int(getattr(kernel.metadata, "shared", -1)),
        }
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified record
        status = classify_exception(exc)
        if status not in ("out_of_resources", "compile_error"):
            status = "compile_error"
        return {"status": status, "compile_s": time.perf_counter() - t0, "error": f"{type(exc).__name__}: {exc}"[:400]}


def _timeout_record(seconds: float) -> dict[str, Any]:
    return {
        "status": "compile_timeout",
        "compile_s": seconds,
        "error": f"compile did not finish within {seconds:.0f} s",
    }


def _noop() -> int:
    return os.getpid()


def interpreter_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def compile_key(job: CompileJob) -> str:
    """Jobs with equal keys compile to the same binary (Triton specialises ints on == 1 and % 16)."""

    def spec(a: Any) -> str:
        if isinstance(a, bool):
            return f"b{int(a)}"
        if isinstance(a, int):
            return ("1" if a == 1 else "D" if a % 16 == 0 else "i") + ("64" if abs(a) >= 2**31 else "")
        if isinstance(a, float):
            return "f"
        return str(a)

    return repr((job.module, job.attr, tuple(spec(a) for a in job.args), sorted(job.kwargs.items())))


class CompilePool:
    """A process pool that compiles configs ahead of the benchmark loop and survives hung/crashed workers.

    Jobs are deduplicated by :func:`compile_key`, and results are kept, so the same binary is
    compiled once however many shapes or evaluators ask for it.
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 60.0) -> None:
        self.workers = workers or max(1, min(16, (os.cpu_count() or 2) - 1))
        self.timeout_s = timeout_s
        self._pool: cf.ProcessPoolExecutor | None = None
        self._jobs: dict[str, tuple[CompileJob, cf.Future, int]] = {}
        self._done: dict[str, dict[str, Any]] = {}

    def _ensure(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["torch", "triton", "solkit.tune.engine"])
            self._pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        return self._pool

    def start(self) -> None:
        """Start every worker now (start-up then overlaps with the caller's own set-up)."""
        pool = self._ensure()
        for _ in range(self.workers):
            pool.submit(_noop)

    def submit(self, job: CompileJob) -> str:
        key = compile_key(job)
        if key not in self._done and key not in self._jobs:
            self._jobs[key] = (job, self._ensure().submit(compile_in_worker, job), 0)
        return key

    def _restart(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()  # hung compiles cannot be cancelled any other way
            pool.shutdown(wait=False, cancel_futures=True)
        for key, (job, fut, tries) in list(self._jobs.items()):
            if not fut.done() or fut.cancelled() or fut.exception() is not None:
                self._jobs[key] = (job, self._ensure().submit(compile_in_worker, job), tries)

    def result(self, key: str) -> dict[str, Any]:
        while key not in self._done:
            job, fut, _ = self._jobs[key]
            try:
                self._done[key] = fut.result(timeout=self.timeout_s)
            except cf.TimeoutError:
                self._done[key] = _timeout_record(self.timeout_s)
                self._jobs.pop(key, None)
                self._restart()
            except cf.process.BrokenProcessPool:
                # A worker died; every job in flight fails with it, so the culprit is unknown. This
                # job is re-run alone in a one-worker pool, which attributes a crash exactly.
                self._jobs.pop(key, None)
                self._restart()
                self._done[key] = self._isolated(job)
            else:
                self._jobs.pop(key, None)
        return self._done[key]

    def _isolated(self, job: CompileJob) -> dict[str, Any]:
        ctx = multiprocessing.get_context("forkserver")
        solo = cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx)
        try:
            return solo.submit(compile_in_worker, job).result(timeout=self.timeout_s)
        except cf.TimeoutError:
            return _timeout_record(self.timeout_s)
        except cf.process.BrokenProcessPool as exc:
            return {"status": "worker_crash", "error": f"compile worker died: {exc}"[:400]}
        finally:
            for proc in list((getattr(solo, "_processes", None) or {}).values()):
                proc.kill()
            solo.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


# --------------------------------------------------------------------------- evaluator
def _rel_err(out: torch.Tensor | Sequence[torch.Tensor], ref: torch.Tensor | Sequence[torch.Tensor]) -> float:
    """Max |out − ref| / max |ref| (the worst over tensor tuples); inf on NaN/Inf or a shape mismatch."""
    if isinstance(out, (tuple, list)) or isinstance(ref, (tuple, list)):
        outs, refs = list(out), list(ref)
        if len(outs) != len(refs):
            return float("inf")
        return max((_rel_err(o, r) for o, r in zip(outs, refs)), default=0.0)
    if out.shape != ref.shape:
        return float("inf")
    # in fp64, a slice at a time: whole-tensor fp64 copies of a large output (a GEMM's [8192, 57344])
    # took ~8x its size at once on top of the tuned call's own memory
    err, scale = 0.0, 0.0
    for o, r in zip(out.reshape(-1).split(_ERR_CHUNK), ref.reshape(-1).split(_ERR_CHUNK)):
        o, r = o.double(), r.double()
        if not torch.isfinite(o).all():
            return float("inf")
        s_part, e_part = r.abs().max().item(), (o - r).abs().max().item()
        if math.isnan(s_part) or math.isnan(e_part):  # a NaN reference judges nothing: fail, as before
            return float("nan")
        scale, err = max(scale, s_part), max(err, e_part)
    return err / (scale or 1.0)


#: elements per slice of :func:`_rel_err` (128 MiB in fp64)
_ERR_CHUNK = 1 << 24


def _as_float(x):
    return type(x)(_as_float(t) for t in x) if isinstance(x, (tuple, list)) else x.float()


class Evaluator:
    """Evaluates configs of one :class:`Problem`; results are memoised by config key."""

    def __init__(
        self,
        problem: Problem,
        *,
        pool: CompilePool | None = None,
        settings: BenchSettings | None = None,
        on_record: Callable[[Evaluation], None] | None = None,
        device: str | None = None,
        isolate: bool = False,
    ) -> None:
        if isolate and problem.ref is None:
            raise ValueError(f"problem {problem.name!r} has no ProblemRef: it cannot be benchmarked in another process")
        self.problem = problem
        self._remote = None
        if isolate:
            from solkit.tune.isolation import BenchProcess

            self._remote = BenchProcess(problem.ref, settings or BenchSettings())
        self.pool = pool
        self.settings = settings or BenchSettings()
        self.on_record = on_record
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.records: dict[str, Evaluation] = {}
        self.fatal: str | None = None
        self._inputs: list[tuple] | None = None
        self._check_inputs: tuple | None = None
        self._ref: torch.Tensor | None = None
        self._tol: float | None = None
        self.best_ms: float | None = None
        self._ckeys: dict[str, str] = {}

    # inputs are built lazily so that compile workers start first
    def _prepare(self) -> None:
        if self._inputs is not None:
            return
        p = self.problem
        self._inputs = [p.make_inputs(1000 + i) for i in range(max(1, self.settings.input_sets))]
        self._check_inputs = p.make_inputs(7)
        with torch.no_grad():
            self._ref = _as_float(p.reference(self._check_inputs))
            torch_err = _rel_err(p.same_dtype(self._check_inputs), self._ref) if p.same_dtype else 0.0
        self._tol = 2.0 * torch_err + p.rel_tol

    def evaluate(self, configs: Sequence[Config]) -> list[Evaluation]:
        """Evaluate a batch: compile all of them in parallel, then benchmark them one by one in order."""
        keys = [config_key(c) for c in configs]
        self.prefetch(configs)
        out = []
        for k, c in zip(keys, configs):
            if k not in self.records:
                self._record(k, self._evaluate_one(k, c))
            out.append(self.records[k])
        return out

    def _compiles(self) -> bool:
        return self.pool is not None and self.problem.compile_job is not None and not interpreter_mode()

    def prefetch(self, configs: Sequence[Config]) -> None:
        """Queue compilation of ``configs`` without waiting (no-op without a pool or in the interpreter)."""
        if not self._compiles():
            return
        for c in configs:
            k = config_key(c)
            if k not in self.records and k not in self._ckeys:
                self._ckeys[k] = self.pool.submit(self.problem.compile_job(c))

    def record_pruned(self, config: Config, reason: str) -> Evaluation:
        k = config_key(config)
        if k not in self.records:
            self._record(k, Evaluation(dict(config), "pruned", error=reason))
        return self.records[k]

    def _record(self, key: str, ev: Evaluation) -> None:
        self.records[key] = ev
        if ev.ok and (self.best_ms is None or ev.time_ms < self.best_ms):
            self.best_ms = ev.time_ms
        if self.on_record is not None:
            self.on_record(ev)

    def _evaluate_one(self, key: str, config: Config) -> Evaluation:
        ev = Evaluation(dict(config), "ok")
        if self.fatal:
            ev.status, ev.error = "aborted", self.fatal
            return ev
        if self._compiles():
            if key not in self._ckeys:
                self.prefetch([config])
            res = self.pool.result(self._ckeys[key])
            ev.compile_s, ev.n_regs, ev.n_spills, ev.shared = (res.get(k) for k in ("compile_s", "n_regs",
                                                                                     "n_spills", "shared"))  # fmt: skip
            if res["status"] != "ok":
                ev.status, ev.error = res["status"], res.get("error")
                return ev
        if self._remote is not None:
            return self._remote.evaluate(config, self.best_ms, ev)
        t0 = time.perf_counter()
        try:
            self._prepare()
            self._check(ev)
            if ev.status == "ok":
                self._time(ev)
        except Exception as exc:  # noqa: BLE001 - a failing config never takes the tuner down
            ev.status, ev.error = classify_exception(exc), f"{type(exc).__name__}: {exc}"[:400]
            if ev.status in ("illegal_address", "timeout") or "cuda error" in str(exc).lower():
                # a sticky CUDA error poisons this process's context: nothing after it can be trusted
                self.fatal = f"CUDA context lost at config {key}: {ev.error}"
        ev.bench_s = time.perf_counter() - t0
        return ev

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()

    def _sync(self, what: str) -> None:
        if self.device != "cuda":
            return
        done = torch.cuda.Event()
        done.record()
        deadline = time.perf_counter() + self.settings.run_timeout_s
        while not done.query():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{what} did not finish within {self.settings.run_timeout_s:.0f} s (timed out)")
            time.sleep(1e-4)

    def _check(self, ev: Evaluation) -> None:
        p = self.problem
        inputs = p.make_inputs(7) if p.fresh_check_inputs else self._check_inputs
        idx = p.output_index
        for i in [idx] if isinstance(idx, int) else (idx or ()):
            if isinstance(inputs[i], torch.Tensor) and inputs[i].is_floating_point():
                inputs[i].fill_(float("nan"))
        out = p.run(ev.config, inputs)
        self._sync("correctness run")
        ev.max_err, ev.tol = _rel_err(out, self._ref), self._tol
        if not ev.max_err <= ev.tol:
            ev.status = "wrong_result"
            ev.error = f"max relative error {ev.max_err:.3g} > allowed {ev.tol:.3g}"

    def _time(self, ev: Evaluation) -> None:
        from solkit.timing import benchmark

        s, p, cfg = self.settings, self.problem, ev.config

        def fn(*inputs):
            p.run(cfg, inputs)

        if self.best_ms is not None and s.screen_reps > 0:
            quick = benchmark(fn, self._inputs, method="events" if self.device == "cuda" else "wall",
                              reps=s.screen_reps, trials=1, warmup=1)  # fmt: skip
            self._sync("screening")
            if quick.median_ms > s.screen_factor * self.best_ms:
                ev.time_ms, ev.timing = quick.median_ms, _timing_summary(quick, screened=True)
                return
        res = benchmark(fn, self._inputs, method=s.method, reps=s.reps, trials=s.trials, warmup=s.warmup)
        self._sync("benchmark")
        ev.time_ms, ev.timing = res.median_ms, _timing_summary(res, screened=False)


def _timing_summary(res, screened: bool) -> dict[str, Any]:
    return {"median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms, "min_ms": res.min_ms,
            "reps": res.reps * res.trials, "method": res.method, "screened": screened}  # fmt: skip
