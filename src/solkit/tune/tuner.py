"""Live tuning: a strategy drives the engine over a space, with the persistent cache in the loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from solkit.tune.cache import TuneCache, pick_winner
from solkit.tune.compile_pool import CompilePool, interpreter_mode
from solkit.tune.engine import Evaluator
from solkit.tune.records import BenchSettings, ConfigEvaluation, TuneProblem
from solkit.tune.search import run_search
from solkit.tune.space import Config, Space, config_key
from solkit.tune.strategies import DEFAULT_BUDGET, DEFAULT_STRATEGY, Prior, make_strategy


@dataclass
class TuneResult:
    best: Config | None
    best_ms: float | None
    strategy: str
    budget: int
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    reused: int = 0
    seeded: int = 0
    space_size: int = 0
    pruned: int = 0
    seconds: float = 0.0
    stopped_by: str = ""

    @property
    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.evaluations:
            out[e["status"]] = out.get(e["status"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_ms": self.best_ms, "strategy": self.strategy, "budget": self.budget,
                "evaluated": len(self.evaluations), "reused_from_cache": self.reused, "seeded": self.seeded,
                "space_size": self.space_size, "pruned_by_prefilter": self.pruned, "seconds": self.seconds,
                "stopped_by": self.stopped_by, "statuses": self.statuses, "evaluations": self.evaluations}  # fmt: skip


def default_pool(problem: TuneProblem) -> CompilePool | None:
    """A compile pool when there is a GPU to compile for and the kernel can be imported by workers."""
    if problem.compile_job is None or interpreter_mode() or not torch.cuda.is_available():
        return None
    pool = CompilePool()
    pool.start()
    return pool


def tune(
    problem: TuneProblem,
    space: Space,
    *,
    strategy: str = DEFAULT_STRATEGY,
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    time_budget_s: float | None = None,
    cache: TuneCache | None = None,
    cache_key: Mapping[str, Any] | None = None,
    prior: Prior | None = None,
    warm_start: bool = True,
    pool: CompilePool | None | str = "auto",
    settings: BenchSettings | None = None,
    on_record: Callable[[ConfigEvaluation], None] | None = None,
    strategy_options: Mapping[str, Any] | None = None,
    isolate: bool = False,
    seeds: Sequence[Config] | None = None,
) -> TuneResult:
    """Search ``space`` for the fastest correct config of ``problem``.

    Configs already in ``cache`` under ``cache_key`` are not measured again: they are told to the
    strategy first and count against ``budget`` (so a re-run with the same budget measures nothing,
    and a list with one new config measures only that one); new measurements are added to the
    cache. With ``warm_start``, other shapes of the kernel in the cache seed the strategy. With
    ``isolate`` (needs ``problem.ref``), configs are benchmarked in a restartable child process, so
    that an illegal address or a hang costs one evaluation instead of ending the search. ``seeds`` (configs
    that did well elsewhere, e.g. on another device: :meth:`TuneCache.warm_start`) are measured first, then
    told to the strategy; they count against ``budget`` like any other evaluation.
    """
    t0 = time.perf_counter()
    own_pool = pool == "auto"
    pool_obj: CompilePool | None = default_pool(problem) if own_pool else pool  # type: ignore[assignment]
    members = space.configs
    member_keys = {config_key(c) for c in members}
    known = cache.load(cache_key) if cache is not None and cache_key is not None else {}
    if prior is None and warm_start and cache is not None and cache_key is not None:
        prior = cache.prior(cache_key)
    strat = make_strategy(strategy, space, seed=seed, prior=prior, **dict(strategy_options or {}))
    reused = 0
    for k, rec in known.items():
        if k in member_keys:
            strat.tell(rec["config"], rec.get("time_ms") if rec.get("status") == "ok" else None)
            reused += 1
    evaluator = Evaluator(problem, pool=pool_obj, settings=settings, on_record=on_record, isolate=isolate)
    new_records: list[dict[str, Any]] = []

    def evaluate(configs):
        evs = evaluator.evaluate(configs)
        recs = [e.to_dict() for e in evs]
        new_records.extend(recs)
        if cache is not None and cache_key is not None:
            cache.add(cache_key, recs)
        return [e.time_ms if e.ok else None for e in evs]

    seeded = [c for c in _dedup(seeds or ()) if config_key(c) in member_keys and config_key(c) not in known]
    seeded = seeded[: max(0, budget - reused)]
    try:
        for c, t in zip(seeded, evaluate(seeded) if seeded else ()):
            strat.tell(c, t)
        trace = run_search(strat, evaluate, max(0, budget - reused - len(seeded)), time_budget_s=time_budget_s)
    finally:
        evaluator.close()
        if own_pool and pool_obj is not None:
            pool_obj.close()
    records = {config_key(r["config"]): r for r in known.values()}
    records.update({config_key(r["config"]): r for r in new_records})
    win = pick_winner(records, member_keys)
    return TuneResult(
        best=dict(records[win]["config"]) if win else None,
        best_ms=records[win]["time_ms"] if win else None,
        strategy=strategy,
        budget=budget,
        evaluations=new_records,
        reused=reused,
        seeded=len(seeded),
        space_size=len(members),
        pruned=len(space.candidates()) - len(members),
        seconds=time.perf_counter() - t0,
        stopped_by=trace.stopped_by,
    )


def _dedup(configs: Sequence[Config]) -> list[Config]:
    out: dict[str, Config] = {}
    for c in configs:
        out.setdefault(config_key(c), dict(c))
    return list(out.values())
