"""Replay search strategies on recorded exhaustive sweeps, on the CPU.

A sweep file (JSON lines, written by ``lab/benchmarks/tune_sweeps.py``) holds a header (task, space,
device) and one record per config (status, time, compile and benchmark seconds). A
:class:`Landscape` turns it into a lookup table; :func:`replay` runs a strategy on it with many
seeds and reports *fraction of best* = exhaustive best time / best time found, after each number of
evaluations (failed configs count as evaluations; configs removed by the static pre-filter are
never proposed, exactly as live).

Warm starts are leave-one-out: for a task, the prior holds the other recorded tasks of the same
kernel, never the task itself.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from solkit.errors import SolkitError
from solkit.tune.search import run_search
from solkit.tune.space import Config, Space, config_key
from solkit.tune.strategies import Prior, make_strategy


@dataclass
class Landscape:
    """One task's measured configs: time in ms (None = failed) and cost in seconds per config key."""

    name: str
    kernel: str
    space: Space
    times: dict[str, float | None]
    costs: dict[str, float] = field(default_factory=dict)
    header: dict[str, Any] = field(default_factory=dict)
    compile_costs: dict[str, float] = field(default_factory=dict)

    @cached_property
    def best_ms(self) -> float:
        """Exhaustive best over the space the tuner searches (constraints and pre-filter applied)."""
        members = {config_key(c) for c in self.space.configs}
        valid = [t for k, t in self.times.items() if t is not None and k in members]
        if not valid:
            raise SolkitError(f"sweep {self.name!r} has no valid config inside its space")
        return min(valid)

    @cached_property
    def best_any_ms(self) -> float:
        """Best over every recorded config, pre-filter ignored (what the filter may cost)."""
        return min(t for t in self.times.values() if t is not None)

    def time(self, config: Config) -> float | None:
        return self.times.get(config_key(config))

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Landscape:
        path = Path(path)
        try:
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        except (OSError, json.JSONDecodeError) as exc:
            raise SolkitError(f"cannot read sweep file {path}: {exc}") from None
        if not lines or lines[0].get("kind") != "header":
            raise SolkitError(f"sweep file {path} must start with a header line ({{'kind': 'header', ...}})")
        header = lines[0]
        device = header.get("device", {})
        space = Space.from_dict(header["space"], smem_limit_bytes=device.get("max_shared_mem"))
        times: dict[str, float | None] = {}
        costs: dict[str, float] = {}
        compile_costs: dict[str, float] = {}
        for rec in lines[1:]:
            k = config_key(rec["config"])
            times[k] = rec.get("time_ms") if rec.get("status") == "ok" else None
            costs[k] = float(rec.get("bench_s") or 0.0)
            compile_costs[k] = float(rec.get("compile_s") or 0.0)
        # configs of the space that the sweep never reached (a cut-short run) are absent, not failed
        recorded = set(times)
        missing = [c for c in space.configs if config_key(c) not in recorded]
        if missing:
            space = Space.from_configs([c for c in space.configs if config_key(c) in recorded], name=space.name)
        kernel = header.get("meta", {}).get("kernel") or header["task"].split("_")[0]
        return cls(header["task"], kernel, space, times, costs, header, compile_costs)


def load_landscapes(paths: Sequence[str | Path]) -> list[Landscape]:
    """Sweep files, or directories of ``*.jsonl`` sweep files."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.exists():
            files.append(p)
        else:
            raise SolkitError(f"replay data {p} does not exist (give sweep .jsonl files or a directory of them)")
    if not files:
        raise SolkitError(f"no sweep files (*.jsonl) found in {', '.join(map(str, paths))}")
    return [Landscape.from_jsonl(f) for f in files]


def prior_for(target: Landscape, others: Sequence[Landscape]) -> Prior:
    """Leave-one-out warm start: the other tasks of the same kernel."""
    return Prior.from_times([o.times for o in others if o.kernel == target.kernel and o.name != target.name])


def replay_one(
    land: Landscape, strategy: str, budget: int, seed: int, prior: Prior | None = None, **options: Any
) -> list[float]:
    """Fraction of best after each evaluation 1..budget (0 until a valid config is found)."""
    strat = make_strategy(strategy, land.space, seed=seed, prior=prior, **options)
    trace = run_search(strat, lambda cfgs: [land.time(c) for c in cfgs], budget)
    best = land.best_ms
    fr = [best / t if t else 0.0 for t in (x if x is not None else None for x in trace.best_so_far())]
    if fr and len(fr) < budget:  # the strategy ran out of configs: it keeps what it found
        fr += [fr[-1]] * (budget - len(fr))
    return fr or [0.0] * budget


def replay_seconds(
    land: Landscape, strategy: str, seconds: float, seed: int, prior: Prior | None = None, **options: Any
) -> tuple[float, int]:
    """(fraction of best, evaluations) after ``seconds`` of simulated tuning time.

    The simulated clock follows the engine: a batch costs its slowest recorded compile (they run in
    parallel; the sweep's compile times were measured with 15 concurrent workers) plus the sum of its
    recorded benchmark times (serial). Worker start-up is not counted."""
    if not any(land.costs.values()) and not any(land.compile_costs.values()):
        raise SolkitError(f"sweep {land.name!r} records no compile/benchmark seconds: time budgets cannot be replayed")
    strat = make_strategy(strategy, land.space, seed=seed, prior=prior, **options)
    clock = [0.0]

    def evaluate(cfgs):
        keys = [config_key(c) for c in cfgs]
        clock[0] += max((land.compile_costs.get(k, 0.0) for k in keys), default=0.0)
        clock[0] += sum(land.costs.get(k, 0.0) for k in keys)
        return [land.time(c) for c in cfgs]

    trace = run_search(strat, evaluate, len(land.space), time_budget_s=seconds, clock=lambda: clock[0])
    _, best_t = trace.best()
    return (land.best_ms / best_t if best_t else 0.0), len(trace.times)


def _geomean(xs: np.ndarray, axis: int | None = None) -> np.ndarray:
    return np.exp(np.mean(np.log(np.maximum(xs, 1e-6)), axis=axis))


def replay(
    lands: Sequence[Landscape],
    strategy: str,
    budget: int,
    seeds: int = 25,
    warm: bool = False,
    bootstrap: int = 400,
    **options: Any,
) -> dict[str, Any]:
    """Replay ``strategy`` on every landscape with ``seeds`` seeds; summary per budget 1..budget.

    ``geomean``: geometric mean of fraction-of-best over all (task, seed) runs; ``ci95``: bootstrap
    interval of that geomean (resampling seeds within each task); ``p10``/``p50``/``p90``: percentiles
    over runs; ``success``: share of runs at ≥ 0.95.
    """
    per_task: dict[str, list[list[float]]] = {}
    for land in lands:
        prior = prior_for(land, lands) if warm else None
        per_task[land.name] = [replay_one(land, strategy, budget, s, prior, **options) for s in range(seeds)]
    arr = np.array([runs for runs in per_task.values()])  # tasks x seeds x budget
    flat = arr.reshape(-1, budget)
    rng = np.random.default_rng(0)
    boots = []
    for _ in range(bootstrap):
        idx = rng.integers(0, seeds, size=(arr.shape[0], seeds))
        sample = np.take_along_axis(arr, idx[:, :, None], axis=1).reshape(-1, budget)
        boots.append(_geomean(sample, axis=0))
    boots_arr = np.array(boots)
    summary = {
        "budget": list(range(1, budget + 1)),
        "geomean": _geomean(flat, axis=0).tolist(),
        "mean": flat.mean(axis=0).tolist(),
        "ci95_lo": np.percentile(boots_arr, 2.5, axis=0).tolist(),
        "ci95_hi": np.percentile(boots_arr, 97.5, axis=0).tolist(),
        "p10": np.percentile(flat, 10, axis=0).tolist(),
        "p50": np.percentile(flat, 50, axis=0).tolist(),
        "p90": np.percentile(flat, 90, axis=0).tolist(),
        "success95": (flat >= 0.95).mean(axis=0).tolist(),
    }
    tasks = {
        name: {"geomean": _geomean(np.array(runs), axis=0).tolist(), "p10": np.percentile(runs, 10, axis=0).tolist()}
        for name, runs in per_task.items()
    }
    return {"strategy": strategy, "warm": warm, "seeds": seeds, "budget": budget, "options": options,
            "tasks": tasks, "summary": summary}  # fmt: skip


# --------------------------------------------------------------------------- synthetic landscapes
def synthetic_landscape(seed: int, kernel: str = "synthetic", shift: float = 0.0) -> Landscape:
    """A GEMM-like landscape for tests: ordinal axes, bowl-shaped log-time with pairwise interactions,
    a shared-memory cliff of failed configs and measurement noise. ``shift`` moves the optimum the
    way a different shape would (for warm-start tests)."""
    rng = random.Random(seed)
    params = {"BLOCK_M": [32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128],
              "num_warps": [2, 4, 8], "num_stages": [2, 3, 4, 5]}  # fmt: skip
    space = Space(params, smem_bytes="(BLOCK_M + BLOCK_N) * BLOCK_K * num_stages * 2", smem_limit_bytes=232448)
    names = list(params)
    centre = {k: rng.uniform(0.3, 0.9) * (len(v) - 1) + shift for k, v in params.items()}
    weight = {k: rng.uniform(0.15, 0.6) for k in names}
    inter = {(a, b): rng.uniform(-0.12, 0.12) for i, a in enumerate(names) for b in names[i + 1 :]}
    times: dict[str, float | None] = {}
    costs: dict[str, float] = {}
    for cfg in space.product():
        x = {k: params[k].index(cfg[k]) for k in names}
        logt = sum(weight[k] * (x[k] - centre[k]) ** 2 for k in names)
        logt += sum(w * (x[a] - centre[a]) * (x[b] - centre[b]) for (a, b), w in inter.items())
        logt += rng.gauss(0, 0.03)
        smem = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * cfg["num_stages"] * 2
        # the real cliff sits a little above the estimate: a few configs pass the filter and fail anyway
        k = config_key(cfg)
        times[k] = None if smem > 0.9 * 232448 * 1.1 or rng.random() < 0.02 else 0.1 * math.exp(max(logt, -3))
        costs[k] = 0.4
    return Landscape(f"{kernel}_{seed}", kernel, space, times, costs, {"task": f"{kernel}_{seed}", "synthetic": True})


def landscape_to_jsonl(land: Landscape, path: str | Path) -> None:
    """Write a landscape in the sweep file format (used for the committed synthetic fixture)."""
    header = {"kind": "header", "task": land.name, "meta": {"kernel": land.kernel}, "space": land.space.to_dict(),
              "device": {"name": "synthetic", "max_shared_mem": land.space.smem_limit_bytes}}  # fmt: skip
    with Path(path).open("w") as fh:
        fh.write(json.dumps(header) + "\n")
        for k, t in land.times.items():
            cfg = json.loads(k)
            rec = {"config": cfg, "status": "ok" if t is not None else "out_of_resources"}
            if k in land.costs:
                rec["bench_s"] = land.costs[k]
            if t is not None:
                rec["time_ms"] = round(t, 6)
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
