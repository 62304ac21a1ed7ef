import importlib.util

import numpy as np
import pytest

from solkit.errors import SolkitError
from solkit.tune.replay import replay_one, synthetic_landscape
from solkit.tune.search import run_search
from solkit.tune.space import config_key
from solkit.tune.strategies import STRATEGIES, Prior, make_strategy

HAS_OPTUNA = importlib.util.find_spec("optuna") is not None
NAMES = [n for n in STRATEGIES if n != "tpe" or HAS_OPTUNA]


@pytest.mark.parametrize("name", NAMES)
def test_strategy_proposes_each_valid_config_at_most_once(name):
    land = synthetic_landscape(3)
    members = {config_key(c) for c in land.space.configs}
    strat = make_strategy(name, land.space, seed=1)
    trace = run_search(strat, lambda cfgs: [land.time(c) for c in cfgs], budget=60)
    keys = [config_key(c) for c in trace.configs]
    assert len(keys) == len(set(keys)) == 60
    assert set(keys) <= members


@pytest.mark.parametrize("name", [n for n in NAMES if n != "tpe"])
def test_strategy_can_exhaust_a_small_space(name):
    from solkit.tune.space import Space

    space = Space({"A": [1, 2, 3], "B": [1, 2]}, ["A * B != 6"])
    times = {config_key(c): float(c["A"] + c["B"]) for c in space.configs}
    trace = run_search(make_strategy(name, space, seed=0), lambda cfgs: [times[config_key(c)] for c in cfgs], 100)
    assert sorted(config_key(c) for c in trace.configs) == sorted(times)
    assert trace.best()[1] == 2.0


def _geo(name, budget, warm=False, seeds=6):
    fr = []
    for i in range(4):
        land = synthetic_landscape(10 + i)
        prior = Prior.from_times([synthetic_landscape(10 + i, shift=0.3).times]) if warm else None
        fr += [replay_one(land, name, budget, s, prior)[-1] for s in range(seeds)]
    return float(np.exp(np.mean(np.log(np.maximum(fr, 1e-6)))))


@pytest.mark.parametrize("name", ["guided", "bandit", "annealing"])
def test_search_strategies_beat_random_on_synthetic_landscapes(name):
    assert _geo(name, 30) > _geo("random", 30) + 0.05


def test_warm_start_helps_the_bandit():
    assert _geo("bandit", 15, warm=True) > _geo("bandit", 15) + 0.05


def test_unknown_strategy_and_options():
    land = synthetic_landscape(0)
    with pytest.raises(SolkitError, match="unknown strategy"):
        make_strategy("nope", land.space)
    with pytest.raises(SolkitError, match="unknown options"):
        make_strategy("random", land.space, bogus=1)


@pytest.mark.skipif(HAS_OPTUNA, reason="optuna installed")
def test_tpe_without_optuna_is_a_clean_error():
    with pytest.raises(SolkitError, match="needs optuna"):
        make_strategy("tpe", synthetic_landscape(0).space)
