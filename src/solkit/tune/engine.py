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

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from solkit.tune.compile_pool import CompilePool, interpreter_mode
from solkit.tune.isolation import BenchProcess
from solkit.tune.records import BenchSettings, ConfigEvaluation, TuneProblem, classify_exception
from solkit.tune.space import Config, config_key


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
    """Evaluates configs of one :class:`TuneProblem`; results are memoised by config key."""

    def __init__(
        self,
        problem: TuneProblem,
        *,
        pool: CompilePool | None = None,
        settings: BenchSettings | None = None,
        on_record: Callable[[ConfigEvaluation], None] | None = None,
        device: str | None = None,
        isolate: bool = False,
    ) -> None:
        if isolate and problem.ref is None:
            raise ValueError(f"problem {problem.name!r} has no ProblemRef: it cannot be benchmarked in another process")
        self.problem = problem
        self._remote = None
        if isolate:
            self._remote = BenchProcess(problem.ref, settings or BenchSettings(), serve=serve_configs)
        self.pool = pool
        self.settings = settings or BenchSettings()
        self.on_record = on_record
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.records: dict[str, ConfigEvaluation] = {}
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

    def evaluate(self, configs: Sequence[Config]) -> list[ConfigEvaluation]:
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

    def record_pruned(self, config: Config, reason: str) -> ConfigEvaluation:
        k = config_key(config)
        if k not in self.records:
            self._record(k, ConfigEvaluation(dict(config), "pruned", error=reason))
        return self.records[k]

    def _record(self, key: str, ev: ConfigEvaluation) -> None:
        self.records[key] = ev
        if ev.ok and (self.best_ms is None or ev.time_ms < self.best_ms):
            self.best_ms = ev.time_ms
        if self.on_record is not None:
            self.on_record(ev)

    def _evaluate_one(self, key: str, config: Config) -> ConfigEvaluation:
        ev = ConfigEvaluation(dict(config), "ok")
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

    def _check(self, ev: ConfigEvaluation) -> None:
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

    def _time(self, ev: ConfigEvaluation) -> None:
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


def serve_configs(conn, ref, settings: BenchSettings) -> None:
    """The body of an isolated benchmark process: rebuild the problem, then evaluate one config per request.

    Runs in the child that :class:`~solkit.tune.isolation.BenchProcess` starts; it answers each
    ``(config, best_ms)`` with the record as a dict, and exits when the CUDA context is lost.
    """
    try:
        problem = ref.build()
        ev = Evaluator(problem, pool=None, settings=settings)
        ev._prepare()  # inputs and reference before the first request, so its deadline is the kernel's
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it per config
        conn.send({"status": "runtime_error", "error": f"benchmark process set-up failed: {exc}"[:400]})
        return
    conn.send({"ready": True})
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        config, best_ms = msg
        ev.best_ms = best_ms
        rec = ev._evaluate_one(config_key(config), config)
        conn.send(rec.to_dict())
        if ev.fatal:  # the context is poisoned: let the parent start a fresh process
            return
