"""Benchmarking in a child process, so that a config that corrupts the CUDA context (an illegal
address), hangs the GPU, or kills its process costs one evaluation instead of the whole search.

The child is forked from the compile pool's ``forkserver`` (torch and triton already imported),
rebuilds the :class:`~solkit.tune.records.TuneProblem` from its :class:`~solkit.tune.records.ProblemRef`,
and evaluates one config per request (correctness gate, then timing): its body is
:func:`solkit.tune.engine.serve_configs`, passed in by the evaluator so that this module stays below
the engine. Binaries compiled by the pool are found in Triton's disk cache. When the child reports a
sticky CUDA error, dies, or misses its deadline, it is killed and the next config gets a fresh child
(a start costs a few seconds: inputs and the reference are rebuilt).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from solkit.tune.records import BenchSettings, ConfigEvaluation, ProblemRef
from solkit.tune.space import Config


class BenchProcess:
    """A restartable child process that evaluates configs one at a time."""

    def __init__(
        self, ref: ProblemRef, settings: BenchSettings, serve: Callable[..., None], start_timeout_s: float = 120.0
    ) -> None:
        self.ref, self.settings = ref, settings
        #: the child's body, ``serve(conn, ref, settings)``: a module-level function (it is pickled by name)
        self.serve = serve
        self.start_timeout_s = start_timeout_s
        self.proc = None
        self.conn = None
        self.restarts = 0

    def _start(self) -> dict[str, Any] | None:
        ctx = multiprocessing.get_context("forkserver")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=self.serve, args=(child, self.ref, self.settings), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout_s):
            self.close()
            return {"status": "timeout", "error": "benchmark process did not start in time"}
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            self.close()
            return {"status": "runtime_error", "error": "benchmark process died while starting"}
        if not msg.get("ready"):
            self.close()
            return msg
        return None

    def evaluate(self, config: Config, best_ms: float | None, ev: ConfigEvaluation) -> ConfigEvaluation:
        """Fill ``ev`` (which carries the compile results) with the child's verdict on ``config``."""
        t0 = time.perf_counter()
        if self.proc is None or not self.proc.is_alive():
            if self.proc is not None:
                self.restarts += 1
            failure = self._start()
            if failure:
                ev.status, ev.error = failure["status"], failure.get("error")
                return ev
        # generous: the correctness run, a screen and a full measurement, each bounded by run_timeout_s
        deadline = 3 * self.settings.run_timeout_s + self.settings.isolate_slack_s
        try:
            self.conn.send((dict(config), best_ms))
            answered = self.conn.poll(deadline)
        except OSError:  # the child died between requests
            answered = True
        if not answered:
            self.close()
            ev.status, ev.error = "timeout", f"no result within {deadline:.0f} s: benchmark process killed"
        else:
            try:
                rec = self.conn.recv()
            except (EOFError, OSError):
                code = self.proc.exitcode if self.proc is not None else None
                self.close()
                ev.status = "runtime_error"
                ev.error = f"benchmark process died (exit code {code}) while running this config"
            else:
                for k in ("status", "time_ms", "max_err", "tol", "timing", "error"):
                    if k in rec:
                        setattr(ev, k, rec[k])
        ev.bench_s = time.perf_counter() - t0
        return ev

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                self.conn.send(None)
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            self.proc.join(timeout=1.0)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=5.0)
            self.proc = None
