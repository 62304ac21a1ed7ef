"""The bookkeeping every budgeted GPU-job script shares: time left, timestamped progress lines, and an atomic
JSON write of the document so far (a job killed past its budget still leaves a readable partial result)."""

from __future__ import annotations

import json
import time
from pathlib import Path


class BudgetedRun:
    """Mixin: the subclass sets ``self.args`` (with ``budget_s`` and ``out``), ``self.t0`` and ``self.doc``."""

    def left(self) -> float:
        return self.args.budget_s - (time.time() - self.t0)

    def log(self, msg: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        self.doc["wall_s"] = round(time.time() - self.t0, 1)
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        tmp.replace(out)


def versions() -> dict[str, str | None]:
    """The software a GPU result depends on, for the JSON documents."""
    import platform

    import torch
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda}  # fmt: skip


def run_workers(script: str, shards: list, timeout_s: float) -> list[dict]:
    """Run ``script --warm-worker <json shard>`` once per shard, all in parallel (compiling configs in worker
    processes, so one that fails or faults cannot take the job down); returns the JSON lines they print.
    Workers still running when ``timeout_s`` is up are killed and keep what they printed."""
    import subprocess
    import sys

    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, script, "--warm-worker", json.dumps(sh)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for sh in shards]  # fmt: skip
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, timeout_s - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return results
