"""Search strategies over a :class:`~solkit.tune.space.Space`, in ask/tell form.

A strategy proposes configs with ``ask(n)`` (at most ``n``, never one it asked before; an empty
list means it has nothing left) and learns their measured times with ``tell(config, time_ms)``
(``None`` for a config that failed). Proposing batches lets the engine compile them in parallel.
The same objects drive live tuning and the CPU replay of recorded sweeps, so replay results
describe exactly what the live tuner does.

Every strategy only sees ``space.configs`` (constraints and the shared-memory pre-filter already
applied). A :class:`Prior` carries normalised results of earlier tunings of *other* shapes of the
same kernel; the bandit and the default strategy use it as a warm start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solkit.errors import SolkitError, choices_hint
from solkit.tune.space import Config, Space, config_key


@dataclass
class Prior:
    """Results of earlier tunings: per source task, {config_key: speed relative to that task's best}."""

    tasks: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def from_times(cls, runs: Sequence[Mapping[str, float | None]]) -> Prior:
        """``runs``: one {config_key: time_ms or None} per earlier task; times are normalised to best/t."""
        tasks = []
        for run in runs:
            valid = [t for t in run.values() if t]
            if not valid:
                continue
            best = min(valid)
            tasks.append({k: (best / t if t else 0.0) for k, t in run.items()})
        return cls(tasks)

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def score(self, key: str) -> float | None:
        """Mean relative speed of a config over the prior tasks that measured it."""
        vals = [t[key] for t in self.tasks if key in t]
        return sum(vals) / len(vals) if vals else None


class Strategy:
    """Base class: bookkeeping of what was asked and what was measured."""

    name = "base"
    batch = 8

    def __init__(self, space: Space, seed: int = 0, prior: Prior | None = None, **options: Any) -> None:
        if options:
            raise SolkitError(f"strategy {self.name!r} got unknown options {sorted(options)}")
        self.space = space
        self.rng = random.Random(seed)
        self.prior = prior or Prior()
        self.configs = list(space.configs)
        self.index = {config_key(c): i for i, c in enumerate(self.configs)}
        self.asked: set[int] = set()
        self.times: dict[int, float | None] = {}

    # -- helpers
    def _fresh(self) -> list[int]:
        return [i for i in range(len(self.configs)) if i not in self.asked]

    def _take(self, idxs: Sequence[int]) -> list[Config]:
        out = []
        for i in idxs:
            if i not in self.asked:
                self.asked.add(i)
                out.append(self.configs[i])
        return out

    def _best(self) -> tuple[int | None, float]:
        best_i, best_t = None, math.inf
        for i, t in self.times.items():
            if t is not None and t < best_t:
                best_i, best_t = i, t
        return best_i, best_t

    def _neighbors(self, i: int, radius: int = 1) -> list[int]:
        return [self.index[config_key(c)] for c in self.space.neighbors(self.configs[i], radius)
                if config_key(c) in self.index]  # fmt: skip

    def _neighbors2(self, i: int) -> list[int]:
        return [
            self.index[config_key(c)] for c in self.space.neighbors2(self.configs[i]) if config_key(c) in self.index
        ]

    def ask(self, n: int) -> list[Config]:
        raise NotImplementedError

    def tell(self, config: Mapping[str, Any], time_ms: float | None) -> None:
        i = self.index.get(config_key(config))
        if i is not None:
            self.asked.add(i)
            self.times[i] = time_ms if time_ms is not None and math.isfinite(time_ms) else None


class Exhaustive(Strategy):
    """Every config in canonical order: the ground truth (and ``triton.autotune``'s behaviour)."""

    name = "exhaustive"
    batch = 16

    def ask(self, n: int) -> list[Config]:
        return self._take(self._fresh()[:n])


class RandomSearch(Strategy):
    """Uniform sampling without replacement: the baseline every other strategy must beat."""

    name = "random"
    batch = 16

    def __init__(self, space: Space, seed: int = 0, prior: Prior | None = None, **options: Any) -> None:
        super().__init__(space, seed, prior, **options)
        self.order = list(range(len(self.configs)))
        self.rng.shuffle(self.order)

    def ask(self, n: int) -> list[Config]:
        return self._take([i for i in self.order if i not in self.asked][:n])


class CoordinateDescent(Strategy):
    """TorchInductor-style local search: try every ±1 neighbour of the incumbent (one batch),
    move to the best if it improves by more than ``threshold``; restart from a random config at a
    local optimum. Starts from ``x0`` when given."""

    name = "coordinate"
    batch = 12

    def __init__(self, space, seed=0, prior=None, x0: Mapping[str, Any] | None = None, threshold: float = 1e-3):
        super().__init__(space, seed, prior)
        self.threshold = threshold
        self.x0 = self.index.get(config_key(x0)) if x0 else None
        self.center: int | None = None

    def ask(self, n: int) -> list[Config]:
        if self.center is None:
            fresh = self._fresh()
            if not fresh:
                return []
            start = self.x0 if self.x0 is not None and self.x0 not in self.asked else self.rng.choice(fresh)
            self.center = start
            if start not in self.asked:
                return self._take([start])
        if self.center not in self.times:
            return []  # the centre is still being measured
        nbrs = [j for j in self._neighbors(self.center) if j not in self.asked]
        if not nbrs:
            self._move()
            if self.center is None:
                return self.ask(n)
            nbrs = [j for j in self._neighbors(self.center) if j not in self.asked]
            if not nbrs:
                self.center = None
                return self.ask(n) if self._fresh() else []
        self.rng.shuffle(nbrs)
        return self._take(nbrs[:n])

    def _move(self) -> None:
        """All neighbours measured: step to the best one, or restart at a local optimum."""
        t_c = self.times.get(self.center)
        cands = [(self.times[j], j) for j in self._neighbors(self.center) if self.times.get(j) is not None]
        if cands:
            t, j = min(cands)
            if t_c is None or t < t_c * (1 - self.threshold):
                self.center = j
                return
        self.center = None


class SimulatedAnnealing(Strategy):
    """Metropolis walk on log-time over ±1/±2 neighbours, geometric cooling, restarts when stuck."""

    name = "annealing"
    batch = 1

    def __init__(self, space, seed=0, prior=None, t0: float = 0.3, cooling: float = 0.93):
        super().__init__(space, seed, prior)
        self.temp, self.cooling = t0, cooling
        self.current: int | None = None
        self.pending: int | None = None

    def ask(self, n: int) -> list[Config]:
        fresh = self._fresh()
        if not fresh:
            return []
        if self.current is None:
            self.pending = self.rng.choice(fresh)
            return self._take([self.pending])
        nbrs = [j for j in self._neighbors(self.current, radius=2) if j not in self.asked]
        if not nbrs:  # stuck: jump to the best unexplored neighbour of the incumbent, else anywhere
            best, _ = self._best()
            nbrs = [j for j in self._neighbors(best, radius=2) if j not in self.asked] if best is not None else []
            nbrs = nbrs or fresh
        self.pending = self.rng.choice(nbrs)
        return self._take([self.pending])

    def tell(self, config, time_ms) -> None:
        super().tell(config, time_ms)
        i = self.index.get(config_key(config))
        if i != self.pending:
            return
        t_new = self.times.get(i)
        t_cur = self.times.get(self.current) if self.current is not None else None
        if t_new is not None and (
            t_cur is None
            or t_new <= t_cur
            or self.rng.random() < math.exp(-(math.log(t_new) - math.log(t_cur)) / max(self.temp, 1e-6))
        ):
            self.current = i
        self.temp *= self.cooling


class UCBBandit(Strategy):
    """Factorised UCB over parameter values (the "RL" strategy: a bandit per parameter).

    Each (parameter, value) arm keeps the rewards of the configs that used it; the reward of a
    config is its speed relative to the best seen so far, squared (``sharpness``: it separates the
    near-best from the merely good), 0 if it failed. A config's score is the
    mean over its parameters of ``mean reward + c·sqrt(ln N / n)`` and the best-scoring unmeasured
    config is asked next. A :class:`Prior` seeds every arm with ``prior_weight`` pseudo-observations
    of the mean relative speed that value had on earlier shapes (warm start).
    """

    name = "bandit"
    batch = 4

    def __init__(self, space, seed=0, prior=None, c: float = 0.6, prior_weight: float = 3.0, init: int = 4,
                 sharpness: float = 2.0):  # fmt: skip
        super().__init__(space, seed, prior)
        self.c, self.prior_weight, self.init, self.sharpness = c, prior_weight, init, sharpness
        names = space.names
        self.coords = np.array([space.coords(cfg) for cfg in self.configs], dtype=np.int64).reshape(-1, len(names))
        self.sizes = [len(space.params[k]) for k in names]
        self.prior_sum = [np.zeros(s) for s in self.sizes]
        self.prior_n = [np.zeros(s) for s in self.sizes]
        if self.prior:
            for task in self.prior.tasks:
                for key, r in task.items():
                    i = self.index.get(key)
                    if i is None:
                        continue
                    for d, v in enumerate(self.coords[i]):
                        self.prior_sum[d][v] += r
                        self.prior_n[d][v] += 1
            for d in range(len(names)):  # rescale to prior_weight pseudo-observations per arm
                scale = np.where(self.prior_n[d] > 0, self.prior_weight / np.maximum(self.prior_n[d], 1), 0)
                self.prior_sum[d] *= scale
                self.prior_n[d] *= scale

    def ask(self, n: int) -> list[Config]:
        fresh = np.array(self._fresh(), dtype=np.int64)
        if fresh.size == 0:
            return []
        measured = list(self.times)
        if len(measured) < self.init and not self.prior:
            return self._take(self.rng.sample(list(fresh), min(n, self.init - len(measured), fresh.size)))
        score = self.scores(fresh)
        score += 1e-6 * np.array([self.rng.random() for _ in range(fresh.size)])  # random tie-break
        order = fresh[np.argsort(-score)]
        return self._take(list(order[:n]))

    def scores(self, idx: np.ndarray, c: float | None = None) -> np.ndarray:
        """Mean over parameters of each arm's mean reward plus its exploration bonus (``c``)."""
        c = self.c if c is None else c
        measured = list(self.times)
        _, best_t = self._best()
        total = len(measured) + 1
        score = np.zeros(len(idx))
        for d in range(len(self.sizes)):
            s, cnt = self.prior_sum[d].copy(), self.prior_n[d].copy()
            for i in measured:
                t = self.times[i]
                s[self.coords[i, d]] += (best_t / t) ** self.sharpness if t else 0.0
                cnt[self.coords[i, d]] += 1
            mean = np.where(cnt > 0, s / np.maximum(cnt, 1e-9), 1.0)  # optimistic for untried arms
            bonus = c * np.sqrt(math.log(total + 1) / np.maximum(cnt, 1e-9))
            score += (mean + np.minimum(bonus, 1.0))[self.coords[idx, d]]
        return score / len(self.sizes)


class TPE(Strategy):
    """Optuna's TPE sampler (optional extra: ``pip install optuna``)."""

    name = "tpe"
    batch = 4

    def __init__(self, space, seed=0, prior=None):
        super().__init__(space, seed, prior)
        try:
            import optuna
        except ImportError:
            raise SolkitError("strategy 'tpe' needs optuna: pip install 'solkit[tune]'") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=8, constant_liar=True)
        self.study = optuna.create_study(sampler=sampler)
        self.trials: dict[int, Any] = {}
        self.distributions = {
            k: optuna.distributions.CategoricalDistribution(list(range(len(v)))) for k, v in space.params.items()
        }

    def ask(self, n: int) -> list[Config]:
        out: list[int] = []
        for _ in range(n * 20):
            if len(out) >= n or not self._fresh():
                break
            trial = self.study.ask(self.distributions)
            cfg = self.space.from_coords([trial.params[k] for k in self.space.names])
            i = self.index.get(config_key(cfg))
            if i is None or i in self.asked or i in out:
                # invalid or repeated proposal: tell TPE it was bad/known so it moves on
                known = self.times.get(i) if i is not None else None
                self.study.tell(trial, math.log(known) if known else 10.0)
                continue
            self.trials[i] = trial
            out.append(i)
        if not out and self._fresh():
            out = [self.rng.choice(self._fresh())]
        return self._take(out)

    def tell(self, config, time_ms) -> None:
        super().tell(config, time_ms)
        i = self.index.get(config_key(config))
        trial = self.trials.pop(i, None)
        if trial is not None:
            t = self.times.get(i)
            self.study.tell(trial, math.log(t) if t else 10.0)


class Guided(Strategy):
    """The default: factorised-bandit exploration plus local refinement around the incumbents.

    1. Start with ``init`` configs: a space-filling sample (greedy max-min distance on the
       value-index grid); with a :class:`Prior`, half of them are the best configs of earlier shapes.
    2. Then, per batch, ask (a) ``local_share`` of the batch among the unmeasured neighbours of the
       ``top`` best configs (one step in one parameter, or in two at once, e.g. 256x128 -> 128x256
       tiles), ranked by the factorised per-value mean reward, and (b) the rest by the factorised
       UCB score over all unmeasured configs (the :class:`UCBBandit` model, exploration ``c``).

    ``model="ridge"`` swaps the factorised statistics for a Bayesian ridge model of log-time on
    one-hot values and their pairs (lower confidence bound); on the recorded GEMM sweeps it was no
    better than random search (docs/tune.md), so it is not the default.
    """

    name = "guided"
    batch = 8

    def __init__(self, space, seed=0, prior=None, init: int = 8, kappa: float = 1.0, ridge: float = 1.0,
                 local_share: float = 0.5, pairs: bool = True, top: int = 2, model: str = "bandit",
                 c: float = 0.6, prior_weight: float = 0.0, sharpness: float = 1.0, batch: int = 8):  # fmt: skip
        super().__init__(space, seed, prior)
        self.batch = batch
        self.init, self.kappa, self.ridge, self.local_share = init, kappa, ridge, local_share
        self.pairs, self.top, self.model = pairs, top, model
        self._bandit = UCBBandit(
            space, seed, prior if prior_weight > 0 else None, c=c, prior_weight=prior_weight, sharpness=sharpness
        )
        self._bandit.asked, self._bandit.times = self.asked, self.times  # shared bookkeeping
        self.initial_batch = init
        self.coords = np.array([space.coords(c) for c in self.configs], dtype=np.int64).reshape(len(self.configs), -1)
        self.features = _design(self.coords, [len(v) for v in space.params.values()])

    def _initial(self, n: int) -> list[int]:
        fresh = self._fresh()
        if self.prior:
            scored = sorted(((self.prior.score(config_key(self.configs[i])) or 0.0, i) for i in fresh), reverse=True)
            top = [i for sc, i in scored[: max(1, n // 2)] if sc > 0]
            picks = top + self._spread([i for i in fresh if i not in top], n - len(top))
            return picks[:n]
        return self._spread(fresh, n)

    def _spread(self, pool: list[int], n: int) -> list[int]:
        if n <= 0 or not pool:
            return []
        span = np.maximum(self.coords.max(axis=0), 1)
        chosen = [self.rng.choice(pool)]
        measured = list(self.times)
        while len(chosen) < min(n, len(pool)):
            ref = np.array(chosen + measured)
            cand = np.array(self.rng.sample(pool, min(len(pool), 64)))
            d = np.abs(self.coords[cand][:, None, :] - self.coords[ref][None, :, :]) / span
            score = d.sum(axis=2).min(axis=1)
            for j in np.argsort(-score):
                if int(cand[j]) not in chosen:
                    chosen.append(int(cand[j]))
                    break
            else:
                break
        return chosen

    def ask(self, n: int) -> list[Config]:
        fresh = self._fresh()
        if not fresh:
            return []
        measured = list(self.times)
        if len(measured) < self.init:
            return self._take(self._initial(min(n, self.init - len(measured))))
        valid = [self.times[i] for i in measured if self.times[i] is not None]
        if not valid:
            return self._take(self._spread(fresh, n))
        if self.model == "bandit":  # factorised per-value statistics (scores: higher is better)
            fresh_arr = np.array(fresh)
            mean = -self._bandit.scores(fresh_arr, c=0.0)
            lcb = -self._bandit.scores(fresh_arr)
        else:
            worst = math.log(max(valid)) + 0.7
            y = np.array([math.log(self.times[i]) if self.times[i] is not None else worst for i in measured])
            mean, std = _bayes_ridge(self.features[measured], y, self.features[fresh], self.ridge)
            lcb = mean - self.kappa * std
        picks: list[int] = []
        n_local = int(round(n * self.local_share))
        if n_local:
            best_ids = sorted((t, i) for i, t in self.times.items() if t is not None)[: self.top]
            local = {j for _, i in best_ids for j in self._neighbors(i) if j not in self.asked}
            if self.pairs:
                local |= {j for _, i in best_ids for j in self._neighbors2(i) if j not in self.asked}
            pos = {i: p for p, i in enumerate(fresh)}
            for j in sorted(local, key=lambda j: mean[pos[j]])[:n_local]:
                picks.append(j)
        for p in np.argsort(lcb):
            if len(picks) >= n:
                break
            if fresh[p] not in picks:
                picks.append(fresh[p])
        return self._take(picks)


def _design(coords: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """One-hot values + pairwise one-hot products + ordinal linear/quadratic terms, per config."""
    n, d = coords.shape
    cols = []
    onehots = []
    for j, s in enumerate(sizes):
        oh = np.zeros((n, s))
        oh[np.arange(n), coords[:, j]] = 1.0
        onehots.append(oh)
        cols.append(oh)
        x = coords[:, j] / max(s - 1, 1)
        cols += [x[:, None], (x**2)[:, None]]
    for a in range(d):
        for b in range(a + 1, d):
            cols.append((onehots[a][:, :, None] * onehots[b][:, None, :]).reshape(n, -1) * 0.7)
    return np.concatenate(cols, axis=1)


def _bayes_ridge(X: np.ndarray, y: np.ndarray, Xq: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and standard deviation of a ridge model (prior precision ``lam``) at ``Xq``.

    Solved in the dual (an n x n system, n = configs measured so far), which is far cheaper than
    the primal when there are more features than measurements."""
    mu = y.mean()
    K = X @ X.T + lam * np.eye(len(y))
    K_inv = np.linalg.inv(K)
    alpha = K_inv @ (y - mu)
    resid = (y - mu) - X @ (X.T @ alpha)
    noise = max(float(resid @ resid) / max(len(y) - 1, 1), 1e-4) + 0.01
    Kq = Xq @ X.T  # q x n
    var = ((Xq * Xq).sum(axis=1) - ((Kq @ K_inv) * Kq).sum(axis=1)) / lam * noise
    return Kq @ alpha + mu, np.sqrt(np.maximum(var, 0.0))


STRATEGIES: dict[str, Callable[..., Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    STRATEGIES[cls.name] = cls
    return cls


for _cls in (Exhaustive, RandomSearch, CoordinateDescent, SimulatedAnnealing, UCBBandit, Guided, TPE):
    register(_cls)

DEFAULT_STRATEGY = "guided"
DEFAULT_BUDGET = 30


def make_strategy(name: str, space: Space, seed: int = 0, prior: Prior | None = None, **options) -> Strategy:
    if name not in STRATEGIES:
        raise SolkitError(choices_hint(name, list(STRATEGIES), "strategy"))
    return STRATEGIES[name](space, seed=seed, prior=prior, **options)
