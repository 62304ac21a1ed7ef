"""The search loop shared by live tuning and replay: ask a batch, evaluate it, tell the results."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from solkit.tune.space import Config
from solkit.tune.strategies import Strategy


@dataclass
class SearchTrace:
    """What a search did: every evaluated config with its time (None if it failed), in order."""

    configs: list[Config] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)
    seconds: float = 0.0
    stopped_by: str = ""

    def best(self) -> tuple[Config | None, float | None]:
        pairs = [(t, i) for i, t in enumerate(self.times) if t is not None]
        if not pairs:
            return None, None
        t, i = min(pairs)
        return self.configs[i], t

    def best_so_far(self) -> list[float | None]:
        out: list[float | None] = []
        cur: float | None = None
        for t in self.times:
            if t is not None and (cur is None or t < cur):
                cur = t
            out.append(cur)
        return out


def run_search(
    strategy: Strategy,
    evaluate: Callable[[Sequence[Config]], Sequence[float | None]],
    budget: int,
    *,
    time_budget_s: float | None = None,
    batch: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SearchTrace:
    """Run ``strategy`` until ``budget`` evaluations (or ``time_budget_s`` seconds) are spent.

    ``evaluate`` gets a batch of configs and returns their times (None for a failed config); in
    replay, ``clock`` is a simulated clock advanced by the recorded compile + benchmark costs.
    """
    trace = SearchTrace()
    t0 = clock()
    batch = max(1, batch or strategy.batch)
    stalls = 0
    while len(trace.times) < budget:
        if time_budget_s is not None and clock() - t0 >= time_budget_s:
            trace.stopped_by = "time"
            break
        # the first batch may be larger (a strategy's initial design compiles all at once)
        want = max(batch, getattr(strategy, "initial_batch", 0)) if not trace.times else batch
        configs = strategy.ask(min(want, budget - len(trace.times)))
        if not configs:
            stalls += 1
            if stalls > 2:  # the strategy has nothing left to propose
                trace.stopped_by = "exhausted"
                break
            continue
        stalls = 0
        results = evaluate(configs)
        for cfg, t in zip(configs, results):
            strategy.tell(cfg, t)
            trace.configs.append(dict(cfg))
            trace.times.append(t)
    else:
        trace.stopped_by = "budget"
    trace.seconds = clock() - t0
    return trace
