"""solkit.testing.do_bench: Triton's signature and return semantics, solkit's protocol, and autotuning.

On a CPU Triton runs through its interpreter (tests/conftest.py sets TRITON_INTERPRET=1), where Triton's
own do_bench finds no active driver; solkit's falls back to the host wall clock.
"""

from __future__ import annotations

import inspect
import statistics

import pytest
import torch
import triton
import triton.language as tl
import triton.testing

from solkit.testing import do_bench, quantiles_of


def work() -> torch.Tensor:
    return torch.ones(4096).sum()


def test_signature_matches_triton():
    ours = inspect.signature(do_bench).parameters
    theirs = inspect.signature(triton.testing.do_bench).parameters
    for name, p in theirs.items():
        assert name in ours, name
        assert ours[name].default == p.default, name
        assert ours[name].kind == p.kind, name
    # solkit's extras are keyword-only, so positional calls written for Triton mean the same
    assert list(ours)[: len(theirs)] == list(theirs)
    assert all(ours[n].kind is inspect.Parameter.KEYWORD_ONLY for n in list(ours)[len(theirs) :])


def test_return_modes():
    samples = do_bench(work, warmup=1, rep=5, return_mode="all")
    assert isinstance(samples, list) and len(samples) >= 1 and all(t > 0 for t in samples)
    for mode in ("mean", "median", "min", "max"):
        value = do_bench(work, warmup=1, rep=5, return_mode=mode)
        assert isinstance(value, float) and value > 0, mode
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(work, return_mode="p50")


def test_quantiles():
    one = do_bench(work, warmup=1, rep=5, quantiles=[0.5])
    assert isinstance(one, float)
    lo_mid_hi = do_bench(work, warmup=1, rep=5, quantiles=(0.2, 0.5, 0.8), return_mode="all")  # quantiles win
    assert len(lo_mid_hi) == 3 and lo_mid_hi[0] <= lo_mid_hi[1] <= lo_mid_hi[2]
    xs = [4.0, 1.0, 3.0, 2.0]
    assert quantiles_of(xs, [0, 0.5, 1]) == [1.0, 2.5, 4.0]
    assert quantiles_of(xs, [0.25])[0] == pytest.approx(1.75)
    assert quantiles_of(xs, [0.5])[0] == statistics.median(xs)
    with pytest.raises(ValueError, match="range"):
        quantiles_of(xs, [1.5])


def test_rep_is_a_time_budget():
    """``rep`` is milliseconds of timed calls, as in Triton: more time, more samples."""
    short = do_bench(work, warmup=0, rep=2, return_mode="all")
    long = do_bench(work, warmup=0, rep=40, return_mode="all")
    assert len(long) > len(short)


def test_grad_to_none():
    w = torch.randn(64, requires_grad=True)
    seen: list[bool] = []

    def step():
        seen.append(w.grad is None)
        (w * 2).sum().backward()

    do_bench(step, warmup=1, rep=3, grad_to_none=[w])
    # every call, the estimate's and the timed ones, starts from a cleared gradient
    assert seen and all(seen)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def autotune_with_solkit(device: str) -> None:
    """``triton.autotune(do_bench=solkit.testing.do_bench)`` times every config and picks the fastest (fp32)."""
    calls: list[dict] = []

    def spy(fn, *args, **kwargs):
        calls.append(kwargs)
        return do_bench(fn, *args, **kwargs)

    configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
    add = triton.autotune(configs=configs, key=["n"], do_bench=spy)(_add_kernel)
    n = 1000
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty(n, device=device)
    add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    assert len(calls) == len(configs)
    assert all(tuple(c.get("quantiles", ())) == (0.5, 0.2, 0.8) for c in calls)
    assert add.best_config in configs
    timings = add.configs_timings
    assert all(len(t) == 3 and 0 < t[1] <= t[0] <= t[2] for t in timings.values())
    assert add.best_config == min(timings, key=timings.get)


def test_triton_autotune_uses_it():
    autotune_with_solkit("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.gpu
def test_gpu_events_and_graphs():
    a = torch.randn(2048, 2048, device="cuda")
    lo_mid_hi = do_bench(lambda: a @ a, quantiles=[0.2, 0.5, 0.8])
    assert 0 < lo_mid_hi[0] <= lo_mid_hi[1] <= lo_mid_hi[2]
    short = torch.randn(1024, device="cuda")  # a call far under 0.1 ms: timed inside a CUDA graph
    assert do_bench(lambda: short.mul_(1.0), warmup=5, rep=20, return_mode="median") > 0
    w = torch.randn(1024, device="cuda", requires_grad=True)
    assert do_bench(lambda: (w * 2).sum().backward(), grad_to_none=[w], rep=20) > 0
