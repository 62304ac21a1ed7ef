"""The harness's additions to the timing protocol: the clean (read-sweep) L2 flush and the prewarm."""

import pytest
import torch

from solkit.timing import L2Flusher, benchmark


def test_unknown_flush_mode_is_rejected():
    with pytest.raises(ValueError, match="allowed: read, write"):
        L2Flusher(torch.device("cpu"), mode="evict")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["read", "write"])
def test_both_flush_modes_time_a_kernel(mode):
    x = torch.randn(4096, 4096, device="cuda")
    res = benchmark(lambda a: a * 2, [(x,)], method="events", reps=10, trials=3, l2_flush_mode=mode, device="cuda")
    assert res.median_ms > 0 and res.l2_flushed
    f = L2Flusher(torch.device("cuda"), mode)
    f()
    torch.cuda.synchronize()
    assert f.buffer.numel() * 4 >= torch.cuda.get_device_properties(0).L2_cache_size


def test_time_based_warmup_runs_for_its_wall_time():
    import time

    from solkit.timing import WARMUP_MAX_CALLS, warm_for

    calls = []
    t0 = time.perf_counter()
    warm_for(lambda: (calls.append(1), time.sleep(2e-4)), None, 15.0, torch.device("cpu"))
    assert (time.perf_counter() - t0) * 1e3 >= 15.0
    assert len(calls) >= 8 and len(calls) % 8 == 0
    calls.clear()
    warm_for(lambda: calls.append(1), None, 1e6, torch.device("cpu"))
    assert len(calls) <= WARMUP_MAX_CALLS + 7  # the cap ends a warm-up of very fast calls
    calls.clear()
    warm_for(lambda: calls.append(1), None, 0.0, torch.device("cpu"))
    assert calls == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_benchmark_warms_for_warmup_ms_on_a_gpu():
    x = torch.randn(1 << 20, device="cuda")
    calls = []

    def fn():
        calls.append(1)
        return x.mul(2.0)

    benchmark(fn, reps=5, trials=1, warmup=3, warmup_ms=0.0, method="events")
    cold = len(calls)
    calls.clear()
    benchmark(fn, reps=5, trials=1, warmup=3, warmup_ms=30.0, method="events")
    assert len(calls) > cold + 8
