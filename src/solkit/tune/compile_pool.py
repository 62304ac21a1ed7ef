"""Compilation ahead of the benchmark loop, in worker processes.

A ``forkserver`` process pool preloads torch and triton once, so each worker starts in a fraction of
a second. A worker calls the kernel's ``warmup`` with the config, which compiles into Triton's
on-disk cache, then loads the binary so that out-of-resources (shared memory, threads) shows up
there, with its register and spill counts. The main process later launches the kernel and finds the
binary in the cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
from typing import Any

from solkit.tune.records import CompileJob, classify_exception, import_module_or_file


def _resolve_jit(module: str, attr: str):
    obj = getattr(import_module_or_file(module), attr)
    while not hasattr(obj, "warmup") and hasattr(obj, "fn"):  # unwrap autotuners / heuristics
        obj = obj.fn
    return obj


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
