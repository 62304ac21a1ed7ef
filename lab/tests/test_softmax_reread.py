"""lab.kernels.softmax_reread (grouped forward, pass 2 re-reads its chunk): values against float64 (max error at
most 2x torch's own same-dtype error + atol).

CPU: the interpreter's form in fp16 (descriptor or plain loads, one poll, then the whole-row fallback; the last
program of a group finds its partners' words and takes the exchange), skews 1-3, a short last chunk, one chunk a
row, one row, fewer rows than the skew. GPU: bf16 / fp16 at Llama vocabulary widths with the real exchange.
"""

from __future__ import annotations

import pytest
import torch
from lab.kernels.softmax_reread import softmax_forward_reread
from softmax_helpers import assert_softmax_close, softmax_inputs

from solkit.errors import SolkitError


@pytest.mark.parametrize(
    "shape,blocks,groups,opts",
    [((5, 1024), 2, 2, {}), ((3, 768), 2, 1, {"skew": 2}), ((7, 1280), 4, 3, {"skew": 3, "tma1": 0, "tma2": 0}),
     ((1, 256), 1, 1, {"skew": 3}), ((7, 1280), 4, 3, {"skew": 2, "tma2": 0, "ev1": 1, "ev2": 2}),
     ((4, 1792), 2, 2, {"tma1": 0, "static_width": False}), ((5, 1280), 2, 2, {"tstore": 1, "skew": 2})],
)  # fmt: skip
def test_reread_values_cpu(shape, blocks, groups, opts, device):
    if device != "cpu":
        pytest.skip("the interpreter's form (the GPU form is test_reread_gpu)")
    x = softmax_inputs(shape, torch.float16, device)
    y = torch.full_like(x, float("nan"))
    info = softmax_forward_reread(x, y, blocks=blocks, groups=groups, num_warps=1, **opts)
    assert info is not None and info["path"] == "reread" and info["groups"] == min(groups, shape[0])
    assert_softmax_close(y, x)


def test_reread_declines_and_options(device):
    x = torch.randn(3, 1000, device=device, dtype=torch.float16)
    assert softmax_forward_reread(x, torch.empty_like(x)) is None  # not whole 256-column blocks
    x = torch.randn(3, 1024, device=device)
    assert softmax_forward_reread(x, torch.empty_like(x)) is None  # fp32
    x = torch.randn(3, 1024, device=device, dtype=torch.float16)
    with pytest.raises(SolkitError):
        softmax_forward_reread(x, torch.empty_like(x), skew=4)


#: (shape, dtype, options): the configurations the benchmark sweeps, at Llama vocabulary widths, one row, a width
#: that is not a multiple of the chunk, fp16, a one-chunk row.
GPU_CASES = [
    ((300, 128256), torch.bfloat16, {}),
    ((1, 128256), torch.bfloat16, {"skew": 3}),
    ((300, 128256), torch.bfloat16, {"skew": 2, "tma1": 0, "tma2": 0, "ev1": 1, "ev2": 2}),
    ((300, 128256), torch.bfloat16, {"blocks": 8, "num_warps": 2, "per_sm": 8, "tstore": 1}),
    ((33, 262144), torch.bfloat16, {"blocks": 32, "num_warps": 8, "per_sm": 2}),
    ((17, 128000), torch.bfloat16, {"l2_prefetch": 1, "per_sm": 6, "skew": 2}),
    ((40, 65536), torch.float16, {"tstore": 1, "tma2": 0}),
    ((2, 14336), torch.bfloat16, {}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype,opts", GPU_CASES)
def test_reread_gpu(shape, dtype, opts):
    x = softmax_inputs(shape, dtype, "cuda")
    y = torch.full_like(x, float("nan"))
    info = softmax_forward_reread(x, y, **opts)
    assert info is not None and info["path"] == "reread"
    assert info["n_spills"] == 0
    assert_softmax_close(y, x)
