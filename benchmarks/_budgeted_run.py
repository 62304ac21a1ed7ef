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
