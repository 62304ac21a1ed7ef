"""The GEMM's config selection through solkit.tune.autotune (and the way back to triton.autotune).

On the CPU the kernels run in Triton's interpreter and the harness timing is replaced by a stand-in
(the interpreter cannot time kernels): what is checked is the plumbing -- pruning by M, the M bucket,
the correctness gate, LAST_LAUNCH, the persisted cache read back by a fresh tuner and by a fresh
process without timing anything. Speed is measured on the GPU (lab/benchmarks/gemm_tuner_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import triton

from solkit.errors import SolkitError
from solkit.kernels.common.capability import caps_for_product, simulate
from solkit.kernels.gemm import dispatch as G
from solkit.tune.decorator import Autotuner
from solkit.tune.engine import Evaluator

HAS_CUDA = torch.cuda.is_available()
interpreter_only = pytest.mark.skipif(HAS_CUDA, reason="interpreter-only check")


def _inputs(M, N, K, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g, dtype=torch.float32).to(torch.float16)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(torch.float16)
    r = torch.randn(M, N, generator=g).to(torch.float16)
    return x, w, r


@pytest.fixture
def fresh_tuners(monkeypatch, tmp_path):
    """Hopper's lists in the interpreter, a scratch tune cache, and a stand-in timer under which the
    config with the smallest BLOCK_K wins. Returns (timed configs, new_process()); new_process()
    forgets every tuner, as a new process would (the cache on disk stays)."""
    monkeypatch.setenv("SOLKIT_TUNE_CACHE", str(tmp_path / "tune"))
    monkeypatch.delenv("SOLKIT_GEMM_TUNER", raising=False)
    timed: list[dict] = []

    def fake_time(self, ev):
        timed.append(dict(ev.config))
        ev.time_ms = 1.0 + ev.config["BLOCK_K"] / 1000 + ev.config.get("SPLIT_K", 1) / 1e4
        ev.timing = {"median_ms": ev.time_ms, "method": "stand-in"}

    monkeypatch.setattr(Evaluator, "_time", fake_time)
    tuners: dict = {}
    make = G._autotuner.__wrapped__  # the uncached builder

    def tuner(family, regime):
        if (family, regime) not in tuners:
            tuners[family, regime] = make(family, regime)
        return tuners[family, regime]

    monkeypatch.setattr(G, "_autotuner", tuner)
    with simulate(caps_for_product("h200-sxm")):  # the H200's plan (Hopper lists), run by the interpreter
        yield timed, tuners.clear


def test_tuner_kind_env(monkeypatch):
    monkeypatch.delenv("SOLKIT_GEMM_TUNER", raising=False)
    assert G.tuner_kind() == "solkit"
    assert isinstance(G._autotuner.__wrapped__("interpreter", "prefill"), Autotuner)
    monkeypatch.setenv("SOLKIT_GEMM_TUNER", "Triton")
    assert G.tuner_kind() == "triton"
    assert isinstance(G._autotuner.__wrapped__("interpreter", "prefill"), triton.runtime.autotuner.Autotuner)
    monkeypatch.setenv("SOLKIT_GEMM_TUNER", "cublas")
    with pytest.raises(SolkitError, match="SOLKIT_GEMM_TUNER"):
        G.tuner_kind()


@interpreter_only
@pytest.mark.parametrize("M", [1, 9, 100])
def test_interpreter_lists_launch_one_config_untimed(M, monkeypatch, tmp_path):
    """The interpreter's lists prune to one config per M bucket: launched as is, nothing timed or cached."""
    monkeypatch.setenv("SOLKIT_TUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("SOLKIT_GEMM_TUNER", raising=False)
    tuner = G._autotuner.__wrapped__(*G.select(M, torch.device("cpu"), True)[:2])
    monkeypatch.setattr(G, "_autotuner", lambda family, regime: tuner)
    x, w, r = _inputs(M, 24, 40, seed=M)
    y = G.gemm(x, w, residual=r)
    torch.testing.assert_close(y.float(), G.reference(x, w, residual=r), atol=2e-2, rtol=1e-2)
    assert tuner.results == {} and not list(tmp_path.rglob("*.json"))
    assert G.LAST_LAUNCH["config"] == {**tuner.best_config.kwargs, "num_warps": 4, "num_stages": 1}


@interpreter_only
def test_hopper_lists_tune_persist_and_are_read_back(fresh_tuners):
    """Prefill (M = 130: bucket 256, the two small tiles) and decode (M = 17: bucket 32, the 64-row
    tiles) each time their pruned candidates once; a new M in the same bucket re-uses the winner; a
    fresh set of tuners (a new process) reads both winners back from the cache without timing."""
    timed, new_process = fresh_tuners
    table = G.load_config_table()["hopper"]
    small = [c for c in table["prefill"]["autotune"] if G.m_range(c)[0] <= 256 <= G.m_range(c)[1]]
    tall = [c for c in table["decode"]["autotune"] if c["BLOCK_M"] == 64]
    cases = [(130, "prefill", small), (17, "decode", tall)]
    winners = {}
    for M, regime, cands in cases:
        x, w, r = _inputs(M, 48, 64, seed=M)
        y = G.gemm(x, w, residual=r)
        torch.testing.assert_close(y.float(), G.reference(x, w, residual=r), atol=2e-2, rtol=1e-2)
        launch = dict(G.LAST_LAUNCH)
        assert launch["regime"] == regime and launch["m_bucket"] == G.m_bucket(M)
        want = min(cands, key=lambda c: (c["BLOCK_K"], c.get("SPLIT_K", 1)))  # the stand-in timer's winner
        assert all(launch["config"][k] == want[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), (launch, want)
        winners[regime] = launch["config"]
        res = next(iter(G._autotuner("hopper", regime).results.values()))
        assert res.statuses == {"ok": len(cands)} and res.reused == 0
    assert len(timed) == len(small) + len(tall)
    # same buckets and epilogue, other M: the bucket's winner, nothing timed
    for M in (200, 20):
        x, w, r = _inputs(M, 48, 64, seed=M)
        G.gemm(x, w, residual=r)
        assert G.LAST_LAUNCH["config"] == winners["prefill" if M > 64 else "decode"]
    assert len(timed) == len(small) + len(tall)
    # a new process: winners come from the cache, nothing is timed
    new_process()
    before = len(timed)
    for M, regime, cands in cases:
        x, w, r = _inputs(M, 48, 64, seed=M + 1)
        y = G.gemm(x, w, residual=r)
        torch.testing.assert_close(y.float(), G.reference(x, w, residual=r), atol=2e-2, rtol=1e-2)
        assert G.LAST_LAUNCH["config"] == winners[regime]
        res = next(iter(G._autotuner("hopper", regime).results.values()))
        assert res.evaluations == [] and res.reused == len(cands)
    assert len(timed) == before


_SECOND_PROCESS = """
import json, sys, torch
from solkit.kernels.common.capability import caps_for_product, simulate
from solkit.kernels.gemm import dispatch as G
from solkit.tune.engine import Evaluator

def refuse(self, ev):
    raise AssertionError("timed again")

Evaluator._time = refuse
h200 = simulate(caps_for_product("h200-sxm"))  # the H200's plan for the whole script (kept: its exit resets it)
h200.__enter__()
g = torch.Generator().manual_seed(5)
x = torch.randn(130, 64, generator=g).half()
w = (torch.randn(48, 64, generator=g) / 8).half()
y = G.gemm(x, w)
res = next(iter(G._autotuner("hopper", "prefill").results.values()))
err = (y.float() - G.reference(x, w)).abs().max().item()
print(json.dumps({"config": G.LAST_LAUNCH["config"], "evaluated": len(res.evaluations), "reused": res.reused,
                  "err": err}))
"""


@interpreter_only
def test_a_second_process_reads_the_winner_without_timing(fresh_tuners, tmp_path):
    timed, _ = fresh_tuners
    x, w, _r = _inputs(130, 48, 64, seed=4)
    G.gemm(x, w)
    first = dict(G.LAST_LAUNCH["config"])
    assert len(timed) == 2
    env = {**os.environ, "TRITON_INTERPRET": "1", "SOLKIT_TUNE_CACHE": str(tmp_path / "tune")}
    out = subprocess.run([sys.executable, "-c", _SECOND_PROCESS], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["evaluated"] == 0 and got["reused"] == 2
    assert got["config"] == first and got["err"] < 2e-2


def test_m_range_prune_works_on_rebuilt_configs():
    """solkit.tune hands the pruner configs rebuilt from dicts: the m ranges are found by content."""
    tuner = G._autotuner.__wrapped__("hopper", "prefill")
    rebuilt = [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=c.num_stages) for c in tuner.configs]
    for bucket, big in [(256, False), (512, False), (1024, True), (8192, True)]:
        kept = G.prune_by_m_range(rebuilt, {"M_BUCKET": bucket})
        assert kept and len(kept) < len(rebuilt)
        assert all((c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 128 * 256) == big for c in kept), bucket


@pytest.mark.gpu
@pytest.mark.parametrize("M", [16, 300])
def test_gpu_tunes_reads_back_and_replays_in_a_graph(M, monkeypatch, tmp_path):
    """bf16 on the GPU: the first call tunes (every candidate checked), a fresh tuner reads the winner
    back without timing, and a CUDA graph captured after that replays the winner's result."""
    monkeypatch.setenv("SOLKIT_TUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("SOLKIT_GEMM_TUNER", raising=False)
    make = G._autotuner.__wrapped__
    tuners: dict = {}

    def tuner(family, regime):
        if (family, regime) not in tuners:
            tuners[family, regime] = make(family, regime)
        return tuners[family, regime]

    monkeypatch.setattr(G, "_autotuner", tuner)
    g = torch.Generator(device="cuda").manual_seed(M)
    x = torch.randn(M, 1024, device="cuda", generator=g).bfloat16()
    w = (torch.randn(512, 1024, device="cuda", generator=g) / 32).bfloat16()
    r = torch.randn(M, 512, device="cuda", generator=g).bfloat16()
    y = G.gemm(x, w, residual=r)
    torch.testing.assert_close(y.float(), G.reference(x, w, residual=r), atol=3e-2, rtol=2e-2)
    launch = dict(G.LAST_LAUNCH)
    res = next(iter(G._autotuner(launch["family"], launch["regime"]).results.values()), None)
    assert res is None or (res.statuses.get("ok", 0) >= 1 and "wrong_result" not in res.statuses)
    tuners.clear()  # a new process, as far as the tuners know
    out = torch.empty_like(y)
    G.gemm(x, w, residual=r, out=out)
    again = next(iter(G._autotuner(launch["family"], launch["regime"]).results.values()), None)
    assert G.LAST_LAUNCH["config"] == launch["config"]
    assert again is None or again.evaluations == []
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        G.gemm(x, w, residual=r, out=out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, y, atol=0, rtol=0)
