"""solkit.tune.autotune's GEMM-driven extensions, through Triton's interpreter (CPU) with a stand-in timer:
named outputs, a reference that sees keyword arguments, a lone candidate launched untimed, CUDA-graph
capture (a key first met while capturing is never tuned) and triton.autotune's best_config / configs."""

import pytest
import torch
import triton
import triton.language as tl

from solkit.tune import decorator as D
from solkit.tune.cache import TuneCache
from solkit.tune.decorator import autotune
from solkit.tune.engine import Evaluator

N = 200  # not a multiple of any block


@triton.jit
def scale_scratch_kernel(x_ptr, y_ptr, scratch_ptr, n, factor, BLOCK: tl.constexpr):
    """y = factor·x; each program also writes BLOCK into its scratch slot (differs between configs)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0) * factor, mask=m)
    tl.store(scratch_ptr + pid, BLOCK)


CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1)]


def grid(meta):
    return (triton.cdiv(N, meta["BLOCK"]),)


@pytest.fixture
def timed(monkeypatch):
    """Replace the harness timing: BLOCK 64 is the fastest; every timed config is recorded."""
    seen = []

    def fake_time(self, ev):
        seen.append(dict(ev.config))
        ev.time_ms = 1.0 / ev.config["BLOCK"]
        ev.timing = {"median_ms": ev.time_ms, "method": "fake"}

    monkeypatch.setattr(Evaluator, "_time", fake_time)
    return seen


def _args(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, generator=g), torch.empty(N), torch.zeros(16, dtype=torch.int32)


def test_named_outputs_keep_scratch_out_of_the_gate(tmp_path, timed):
    x, y, scratch = _args()
    plain = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path / "a"))(scale_scratch_kernel)
    plain[grid](x, y, scratch, N, 3.0)
    # without outputs the scratch slots count as outputs, and the second config "disagrees" there
    assert next(iter(plain.results.values())).statuses == {"ok": 1, "wrong_result": 1}
    named = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path / "b"), outputs=["y_ptr"])(
        scale_scratch_kernel
    )
    y2 = torch.empty(N)
    named[grid](x, y2, scratch, N, 3.0)
    res = next(iter(named.results.values()))
    assert res.statuses == {"ok": 2} and res.best["BLOCK"] == 64
    torch.testing.assert_close(y2, 3 * x)


def test_reference_sees_keyword_arguments(tmp_path, timed):
    calls = []

    def ref(x, y, scratch, n, factor=None, **kwargs):
        calls.append(factor)
        return x.double() * factor

    kern = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path), reference=ref, outputs=["y_ptr"])(
        scale_scratch_kernel
    )
    x, y, scratch = _args(1)
    kern[grid](x, y, scratch, N, factor=2.5)
    assert calls == [2.5]
    assert next(iter(kern.results.values())).statuses == {"ok": 2}
    # a reference that disagrees fails every config: no winner, one line
    bad = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path / "bad"), outputs=["y_ptr"],
                   reference=lambda x, y, s, n, factor: x.double())(scale_scratch_kernel)  # fmt: skip
    with pytest.raises(D.SolkitError, match="no config"):
        bad[grid](x, torch.empty(N), scratch, N, factor=2.5)
    # ... and leaves nothing in the cache: a later tuner (a later process) measures the key afresh
    assert not list((tmp_path / "bad").rglob("*.json"))
    before = len(timed)
    good = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path / "bad"), outputs=["y_ptr"])(
        scale_scratch_kernel
    )
    y = torch.empty(N)
    good[grid](x, y, scratch, N, factor=2.5)
    torch.testing.assert_close(y, 2.5 * x)
    assert len(timed) == before + 2 and list((tmp_path / "bad").rglob("*.json"))


def test_outputs_must_name_arguments():
    with pytest.raises(D.SolkitError, match="not arguments"):
        autotune(configs=CONFIGS, key=["n"], outputs=["out"])(scale_scratch_kernel)


def test_lone_candidate_is_launched_untimed(tmp_path, timed):
    keep_first = {"early_config_prune": lambda configs, named: configs[:1]}
    kern = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path), prune_configs_by=keep_first)(
        scale_scratch_kernel
    )
    x, y, scratch = _args(2)
    kern[grid](x, y, scratch, N, 2.0)
    torch.testing.assert_close(y, 2 * x)
    assert timed == [] and kern.results == {} and not list(tmp_path.rglob("*.json"))
    assert kern.best_config.kwargs == {"BLOCK": 32}


def test_capture_uses_the_cached_winner_and_never_tunes(tmp_path, timed, monkeypatch):
    cache = TuneCache(tmp_path)
    x, y, scratch = _args(3)
    monkeypatch.setattr(D, "_capturing", lambda: True)
    # nothing cached: the first candidate runs once, with a warning, and is not kept for the key
    kern = autotune(configs=CONFIGS, key=["n"], cache=cache, outputs=["y_ptr"])(scale_scratch_kernel)
    with pytest.warns(UserWarning, match="capture"):
        kern[grid](x, y, scratch, N, 2.0)
    torch.testing.assert_close(y, 2 * x)
    assert timed == [] and kern.best == {} and kern.results == {}
    assert kern.best_config.kwargs == {"BLOCK": 32}  # what that launch ran (LAST_LAUNCH reads it)
    # outside capture it tunes (and persists); a fresh tuner in capture then takes the cached winner
    monkeypatch.setattr(D, "_capturing", lambda: False)
    kern[grid](x, y, scratch, N, 2.0)
    assert len(timed) == 2 and kern.best_config.kwargs == {"BLOCK": 64}
    monkeypatch.setattr(D, "_capturing", lambda: True)
    fresh = autotune(configs=CONFIGS, key=["n"], cache=cache, outputs=["y_ptr"])(scale_scratch_kernel)
    y3 = torch.empty(N)
    fresh[grid](x, y3, scratch, N, 2.0)
    torch.testing.assert_close(y3, 2 * x)
    assert len(timed) == 2 and list(fresh.best.values()) == [{"BLOCK": 64, "num_warps": 1, "num_stages": 3}]


def test_best_config_and_configs_match_triton_autotune(tmp_path, timed):
    kern = autotune(configs=CONFIGS, key=["n"], cache=TuneCache(tmp_path), outputs=["y_ptr"])(scale_scratch_kernel)
    assert kern.best_config is None
    assert [(c.kwargs, c.num_warps) for c in kern.configs] == [(c.kwargs, c.num_warps) for c in CONFIGS]
    x, y, scratch = _args(4)
    kern[grid](x, y, scratch, N, 2.0)
    best = kern.best_config
    assert isinstance(best, triton.Config) and best.kwargs == {"BLOCK": 64} and best.num_warps == 1
    # steady state: the key is known, nothing is timed again
    kern[grid](x, torch.empty(N), scratch, N, 2.0)
    assert len(timed) == 2


@triton.jit
def scale_opt_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, TWICE: tl.constexpr = 0):
    """y = 2·x, with TWICE=1 written as x + x (a knob some configs name and others leave at its default)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, x + x if TWICE else x * 2.0, mask=m)


def test_configs_with_different_keys_are_all_kept(tmp_path, timed):
    """triton.autotune lists may differ in their keys; every config is a candidate and launches with its own."""
    configs = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64, "TWICE": 1}, num_warps=1)]
    kern = autotune(configs=configs, key=["n"], cache=TuneCache(tmp_path))(scale_opt_kernel)
    assert len(kern.space) == 2
    assert [c.kwargs for c in kern.configs] == [{"BLOCK": 32}, {"BLOCK": 64, "TWICE": 1}]
    x, y, _ = _args(5)
    kern[grid](x, y, N)
    torch.testing.assert_close(y, 2 * x)
    assert sorted(c["BLOCK"] for c in timed) == [32, 64]
    assert kern.best_config.kwargs == {"BLOCK": 64, "TWICE": 1}
