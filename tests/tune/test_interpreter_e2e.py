"""End to end through Triton's interpreter (CPU): a real kernel with a deliberately wrong, faster variant."""

import torch
import triton
import triton.language as tl

from solkit.tune.cache import TuneCache
from solkit.tune.decorator import autotune
from solkit.tune.records import TuneProblem
from solkit.tune.space import Space
from solkit.tune.tuner import tune


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, HALF: tl.constexpr):
    """y = 2·x. With HALF=1 only the first half of the programs write: less work, wrong result."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    active = (HALF == 0) | (pid * 2 < tl.num_programs(0))
    m = (offs < n) & active
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0) * 2.0, mask=m)


N = 200  # not a multiple of any block: tails are exercised


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, generator=g) + 1.0, torch.empty(N))


def _run(cfg, inputs):
    x, y = inputs
    scale_kernel[(triton.cdiv(N, cfg["BLOCK"]),)](x, y, N, BLOCK=cfg["BLOCK"], HALF=cfg["HALF"], num_warps=1)
    return y


def test_wrong_variant_never_wins_through_the_engine():
    problem = TuneProblem("scale", _inputs, _run, reference=lambda inp: inp[0].double() * 2, output_index=1)
    space = Space({"BLOCK": [16, 32, 64], "HALF": [0, 1]})
    res = tune(problem, space, strategy="exhaustive", budget=10, pool=None)
    assert res.best["HALF"] == 0
    assert res.statuses == {"ok": 3, "wrong_result": 3}
    wrong = [e for e in res.evaluations if e["status"] == "wrong_result"]
    assert all("time_ms" not in e for e in wrong)


def test_decorator_list_mode_cache_and_incremental_configs(tmp_path):
    cache = TuneCache(tmp_path)
    configs = [
        triton.Config({"BLOCK": 64, "HALF": 1}, num_warps=1),
        triton.Config({"BLOCK": 32, "HALF": 0}, num_warps=1),
    ]
    kern = autotune(configs=configs, key=["n"], cache=cache)(scale_kernel)
    x, y = _inputs(1)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK"]),)  # noqa: E731
    kern[grid](x, y, N)
    torch.testing.assert_close(y, 2 * x)
    res = next(iter(kern.results.values()))
    assert res.best == {"BLOCK": 32, "HALF": 0, "num_warps": 1, "num_stages": 3}
    assert len(res.evaluations) == 2
    # a new process (new decorator object) with one more config measures only that config
    more = autotune(configs=[*configs, triton.Config({"BLOCK": 128, "HALF": 0}, num_warps=1)], key=["n"], cache=cache)
    kern2 = more(scale_kernel)
    y2 = torch.empty(N)
    kern2[grid](x, y2, N)
    torch.testing.assert_close(y2, 2 * x)
    res2 = next(iter(kern2.results.values()))
    assert [e["config"]["BLOCK"] for e in res2.evaluations] == [128]
    assert res2.reused == 2
    # same list again: nothing is measured, the winner is read back
    kern3 = more(scale_kernel)
    kern3[grid](x, torch.empty(N), N)
    res3 = next(iter(kern3.results.values()))
    assert res3.evaluations == [] and res3.best == res2.best


def test_decorator_search_mode_with_a_dict_space(tmp_path):
    space = {"params": {"BLOCK": [16, 32, 64], "HALF": [0, 1], "num_warps": [1]}}
    kern = autotune(key=["n"], space=space, budget=6, cache=TuneCache(tmp_path))(scale_kernel)
    x, y = _inputs(3)
    kern[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, y, N)
    torch.testing.assert_close(y, 2 * x)
    res = next(iter(kern.results.values()))
    assert res.strategy == "guided" and len(res.evaluations) == 6
    assert res.best["HALF"] == 0
