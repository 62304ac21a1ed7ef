"""The harness's additions to the timing protocol: the clean (read-sweep) L2 flush and the prewarm."""

import pytest
import torch

from solkit.harness.timing import L2Flusher, benchmark


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
