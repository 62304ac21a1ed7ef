"""The evaluation engine on the CPU: a fake problem whose configs fail in every way a kernel can."""

import sys
import time
from pathlib import Path

import pytest
import torch

from solkit.tune.compile_pool import CompilePool
from solkit.tune.engine import Evaluator
from solkit.tune.records import CompileJob, TuneProblem, classify_exception
from solkit.tune.space import Space
from solkit.tune.tuner import tune


class OutOfResources(Exception):
    pass


def fake_problem():
    """``mode`` picks the behaviour; "wrong" and "stale" are the fastest configs, and wrong."""

    def make_inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(64, generator=g) + 3.0, torch.empty(64))

    def run(cfg, inputs):
        x, y = inputs
        mode = cfg["mode"]
        if mode == "raise":
            raise RuntimeError("triton launch failed: invalid argument")
        if mode == "oor":
            raise OutOfResources("out of resource: shared memory")
        if mode == "illegal":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if mode == "stale":
            return y  # writes nothing: the poisoned output stays NaN
        if mode == "wrong":
            y.copy_(x * 2.05)
            return y
        time.sleep(0.0002 * cfg["work"])
        torch.mul(x, 2.0, out=y)
        return y

    return TuneProblem("fake", make_inputs, run, reference=lambda inp: inp[0].double() * 2, output_index=1)


def space(modes):
    return Space({"mode": modes, "work": [1, 4]})


def test_wrong_and_failing_configs_are_classified_and_never_win():
    ev = Evaluator(fake_problem())
    sp = space(["wrong", "stale", "raise", "oor", "good"])
    results = {(r.config["mode"], r.config["work"]): r for r in ev.evaluate(sp.configs)}
    assert results[("wrong", 1)].status == "wrong_result"
    assert results[("stale", 1)].status == "wrong_result"
    assert results[("raise", 1)].status == "runtime_error"
    assert results[("oor", 1)].status == "out_of_resources"
    assert results[("good", 1)].ok and results[("good", 4)].ok
    assert all(r.time_ms is None for r in results.values() if r.status != "ok")
    res = tune(fake_problem(), sp, strategy="exhaustive", budget=100, pool=None)
    assert res.best == {"mode": "good", "work": 1}
    assert res.statuses == {"wrong_result": 4, "runtime_error": 2, "out_of_resources": 2, "ok": 2}


def test_illegal_address_stops_further_gpu_work_but_not_the_tuner():
    sp = Space({"mode": ["good", "illegal", "good2"], "work": [1]})
    prob = fake_problem()
    orig = prob.run
    prob.run = lambda cfg, inp: orig({**cfg, "mode": "good" if cfg["mode"] == "good2" else cfg["mode"]}, inp)
    res = tune(prob, sp, strategy="exhaustive", budget=10, pool=None)
    statuses = [e["status"] for e in res.evaluations]
    assert statuses == ["ok", "illegal_address", "aborted"]
    assert res.best == {"mode": "good", "work": 1}


@pytest.mark.parametrize(
    "exc,status",
    [
        (OutOfResources("x"), "out_of_resources"),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "illegal_address"),
        (type("PTXASError", (Exception,), {})("ptxas fatal"), "compile_error"),
        (type("CompilationError", (Exception,), {})("at 1:2"), "compile_error"),
        (TimeoutError("correctness run did not finish (timed out)"), "timeout"),
        (ValueError("something else"), "runtime_error"),
    ],
)
def test_classify_exception(exc, status):
    assert classify_exception(exc) == status


@pytest.mark.slow
def test_compile_pool_survives_hangs_crashes_and_errors(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    sys.path.insert(0, str(Path(__file__).parent))
    pool = CompilePool(workers=2, timeout_s=4.0)
    try:
        keys = {m: pool.submit(CompileJob("_fake_jit", "fake_kernel", (torch.float16, 16), {"mode": m, "tag": m}))
                for m in ["ok", "oor", "error", "hang", "crash"]}  # fmt: skip
        keys["after"] = pool.submit(CompileJob("_fake_jit", "fake_kernel", (torch.float16, 16), {"mode": "ok", "x": 1}))
        got = {m: pool.result(k)["status"] for m, k in keys.items()}
    finally:
        pool.close()
    assert got == {"ok": "ok", "oor": "out_of_resources", "error": "compile_error", "hang": "compile_timeout",
                   "crash": "worker_crash", "after": "ok"}  # fmt: skip


@pytest.mark.slow
def test_isolated_benchmarking_survives_illegal_address_crash_and_hang():
    """Each failure costs one evaluation: the configs after it are still measured."""
    sys.path.insert(0, str(Path(__file__).parent))
    import _fake_jit

    from solkit.tune.records import BenchSettings

    problem = _fake_jit.make_fake_problem()
    sp = Space({"mode": ["good", "illegal", "exit", "hang", "wrong", "late"], "work": [1]})
    settings = BenchSettings(reps=3, trials=1, run_timeout_s=1.0, isolate_slack_s=3.0)
    res = tune(problem, sp, strategy="exhaustive", budget=10, pool=None, isolate=True, settings=settings)
    got = {e["config"]["mode"]: e["status"] for e in res.evaluations}
    assert got == {"good": "ok", "illegal": "illegal_address", "exit": "runtime_error", "hang": "timeout",
                   "wrong": "wrong_result", "late": "ok"}  # fmt: skip
    assert res.best["mode"] in ("good", "late")
