"""solkit.kernels.softmax.tma: the one-word exchange (``word1``, ``backoff``) of the TMA forward, CPU (the
interpreter's form: one poll, then the whole-row fallback) and GPU (the PTX spin), and its launch constexprs."""

from __future__ import annotations

import pytest
import torch
from softmax_helpers import assert_softmax_close, softmax_inputs


@pytest.mark.parametrize("shape,blocks,groups", [((5, 1024), 2, 2), ((20, 768), 1, 2), ((1, 256), 1, 1)])
def test_tma_one_word_partials_cpu(shape, blocks, groups, device):
    """The TMA forward with one-word partials (``word1``; tags ``((j >> 3) + 1) & 7``: 10 arrivals wrap the 8
    slots) through the interpreter."""
    if device != "cpu":
        pytest.skip("the interpreter's form")
    from solkit.kernels.softmax.tma import softmax_forward_tma

    x = softmax_inputs(shape, torch.float16, device)
    y = torch.full_like(x, float("nan"))
    assert softmax_forward_tma(x, y, blocks=blocks, groups=groups, num_warps=1, word1=2, backoff=64) is not None
    assert_softmax_close(y, x)


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [{"word1": 1}, {"word1": 2, "backoff": 100, "groups": 24, "per_sm": 8}])
@pytest.mark.parametrize("shape", [(300, 128256), (1000, 128256), (33, 262144)])
def test_tma_one_word_partials_gpu(shape, opts):
    from solkit.kernels.softmax.tma import softmax_forward_tma

    x = softmax_inputs(shape, torch.bfloat16, "cuda")
    y = torch.full_like(x, float("nan"))
    assert softmax_forward_tma(x, y, **opts) is not None
    assert_softmax_close(y, x)


def test_word_meta():
    """The one-word exchange's constexprs: none when off (the default kernel unchanged), the poll vector's length."""
    from solkit.kernels.softmax.tma import TMA_DEFAULT, word_meta

    assert word_meta(0, 100, 2) == {}
    assert word_meta(1, 0, 2) == {"WORD1": 1}
    assert word_meta(2, 100, 4) == {"WORD1": 128, "BACKOFF": 100}
    for lo, hi, opts in TMA_DEFAULT["ranges"]:
        assert lo <= hi and set(opts) <= {"blocks", "num_warps", "per_sm", "stages", "l2_prefetch", "word1", "backoff"}
