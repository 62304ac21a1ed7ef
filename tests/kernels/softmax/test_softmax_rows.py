"""solkit.kernels.softmax.rows (exact-tile whole-row forward), solkit.kernels.softmax.tma (TMA-staged packed
forward) and the packed path's grid fill: values against float64 (max error at most 2x torch's own same-dtype error
+ atol).

CPU: the rows kernel through the interpreter in fp16 with 1-2 warps (tiles of 128-256 words), so 1792 columns
already take three pieces; the TMA kernel's interpreter form (descriptor loads, one poll, whole-row fallback);
the planners. GPU: bf16 at Llama widths (14336, 4096, 128256, 262144), odd row counts, every pipeline depth,
the TMA kernel's real exchange (PTX spin).
"""

from __future__ import annotations

import pytest
import torch
from softmax_helpers import assert_softmax_close, softmax_inputs

from solkit.kernels.common.capability import INTERPRETER_CAPS, caps_for_product
from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward
from solkit.kernels.softmax.plan import plan
from solkit.kernels.softmax.rows import row_pieces, softmax_forward_rows

H200 = caps_for_product("h200-sxm")


def test_row_pieces():
    assert row_pieces(14336, 8) == (4, 2, 1)  # 7 x 1024 words
    assert row_pieces(4096, 8) == (2, 0, 0)
    assert row_pieces(4096, 4) == (4, 0, 0)
    assert row_pieces(1792, 1) == (4, 2, 1)
    assert row_pieces(15 * 256, 1) is None  # four pieces
    assert row_pieces(1000, 1) is None  # not whole tiles
    assert row_pieces(14336, 16, 2) == (4, 2, 1)  # 8-byte vectors at 16 warps


def test_rows_by_plan():
    """The rows path: a default at 14336 on a GPU only; asked for, it comes first (TMA skipped) with the options given,
    and a width that does not tile drops it."""
    bf16 = torch.bfloat16
    assert plan("fwd", 14336, bf16, INTERPRETER_CAPS)[0][0] == "single"  # CPU: never by default
    assert plan("fwd", 14336, bf16, H200)[0][0] == "rows"
    assert plan("fwd", 14336, bf16, INTERPRETER_CAPS, "rows", {"depth": 1})[0] == ("rows", {"depth": 1})
    assert plan("fwd", 14336, bf16, H200, "rows", {"depth": 1})[0] == ("rows", {"depth": 1})
    assert plan("fwd", 1031, torch.float16, H200, "rows", {"num_warps": 1})[0][0] == "single"


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "shape,num_warps,vec", [((5, 1792), 1, 4), ((9, 1280), 1, 4), ((1, 512), 2, 4), ((6, 512), 1, 4), ((5, 1792), 2, 2)]
)
def test_rows_values(shape, num_warps, vec, depth, device):
    """Rows of three, two and one pieces; more rows than programs (4 stand-in SMs x 1 program), one row."""
    x = softmax_inputs(shape, torch.float16, device)
    y = torch.full_like(x, float("nan"))
    info = softmax_forward_rows(x, y, num_warps=num_warps, depth=depth, per_sm=1, vec=vec)
    assert info is not None and info["path"] == "rows"
    assert_softmax_close(y, x)


def test_rows_falls_back_when_not_tiled(device):
    """``rows=True`` on a width that does not tile exactly takes the next path, still correct."""
    x = softmax_inputs((3, 1031), torch.float16, device)
    assert_softmax_close(softmax_forward(x, path="rows", options={"num_warps": 1}), x)
    assert softmax_forward_rows(x, torch.empty_like(x), num_warps=1) is None
    assert softmax_forward_rows(x.float(), torch.empty_like(x.float()), num_warps=1) is None  # fp32: not this path


def test_tma_by_plan(monkeypatch):
    """Asked for, the TMA forward comes first; asking for another path skips its default; the default by width is
    GPU-only and needs whole 256-column blocks."""
    from solkit.kernels.softmax import tma as st

    bf16 = torch.bfloat16
    monkeypatch.setitem(st.TMA_DEFAULT, "ranges", [(196608, None, {"blocks": 32})])
    assert plan("fwd", 262144, bf16, INTERPRETER_CAPS)[0][0] == "looped"  # CPU: never by default
    assert plan("fwd", 262144, bf16, INTERPRETER_CAPS, "tma")[0] == ("tma", {})
    assert plan("fwd", 262144, bf16, H200, "tma", {"stages": 4})[0] == ("tma", {"stages": 4})
    assert plan("fwd", 262144, bf16, H200)[0] == ("tma", {"blocks": 32})
    assert plan("fwd", 262144, bf16, H200, "packed", {"block": 64})[0] == ("packed", {"block": 64})
    assert plan("fwd", 262144 + 16, bf16, H200)[0][0] == "packed"  # not whole 256-column blocks


def test_packed_fill_layout(monkeypatch):
    """``fill``: the fewest chunks, no wider than the block, whose count divides the resident slots."""
    from solkit.kernels.softmax import packed as sp

    monkeypatch.setattr(sp, "sm_count", lambda t: 132)
    t = torch.empty(1)
    assert sp._layout(128256, 4096, 4, t, False, 1) == (33, 3888, 4096)  # 528 = 16 x 33
    assert sp._layout(128256, 4096, 4, t, False, 0) == (32, 4016, 4096)
    assert sp._layout(262144, 8192, 2, t, False, 1) == (33, 7952, 8192)  # 264 = 8 x 33
    assert sp._layout(128256, 2048, 4, t, False, 1) == (66, 1952, 2048)
    assert sp._layout(14336, 16384, 1, t, False, 1) == (1, 14336, 16384)


def test_packed_fill_values(device):
    x = softmax_inputs((5, 1030), torch.float16, device)
    opts = {"block": 256, "groups": 2, "fill": 1} if device == "cpu" else {"fill": 1}
    assert_softmax_close(softmax_forward(x, path="packed", options=opts), x)
    dy = torch.randn_like(x)
    y = softmax_forward(x)
    dx = softmax_backward(dy, y, path="packed", options=opts)
    yd = y.double()
    ref = yd * (dy.double() - (yd * dy.double()).sum(-1, keepdim=True))
    assert (dx.double() - ref).abs().max().item() < 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize(
    "opts",
    [{}, {"depth": 1}, {"depth": 3, "per_sm": 1}, {"l2_prefetch": 1}, {"hint": 2},
     {"depth": 4, "per_sm": 1, "l2_prefetch": 1}, {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 3}],
)  # fmt: skip
@pytest.mark.parametrize("shape", [(1000, 14336), (1, 14336), (263, 14336), (300, 4096), (7, 12288)])
def test_rows_bf16_gpu(shape, opts):
    x = softmax_inputs(shape, torch.bfloat16, "cuda")
    y = torch.full_like(x, float("nan"))
    info = softmax_forward_rows(x, y, **opts)
    assert info is not None and info["path"] == "rows"  # (2 programs an SM with the L2 prefetch: 2 bytes spilled)
    assert_softmax_close(y, x)


@pytest.mark.parametrize(
    "shape,blocks,groups", [((5, 1024), 2, 2), ((3, 768), 2, 1), ((7, 1280), 4, 3), ((1, 256), 1, 1)]
)
def test_tma_values_cpu(shape, blocks, groups, device):
    """The TMA kernel through the interpreter (one poll, then the whole-row fallback): whole chunks, a short last
    chunk (masked blocks), one chunk per row, more rows than groups."""
    if device != "cpu":
        pytest.skip("the interpreter's form (the GPU form is test_tma_gpu)")
    from solkit.kernels.softmax.tma import softmax_forward_tma

    x = softmax_inputs(shape, torch.float16, device)
    for static_width in (True, False):  # the width compiled in, or a runtime argument
        y = torch.full_like(x, float("nan"))
        info = softmax_forward_tma(x, y, blocks=blocks, groups=groups, num_warps=1, static_width=static_width)
        assert info is not None and info["groups"] == min(groups, shape[0])
        assert_softmax_close(y, x)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "opts", [{}, {"stages": 5}, {"blocks": 32, "num_warps": 8, "per_sm": 2, "stages": 4}, {"blocks": 8, "num_warps": 2,
                                                                                         "per_sm": 8, "stages": 4}]
)  # fmt: skip
@pytest.mark.parametrize(
    "shape,dtype",
    [((300, 128256), torch.bfloat16), ((1, 128256), torch.bfloat16), ((33, 262144), torch.bfloat16),
     ((17, 128000), torch.bfloat16), ((40, 65536), torch.float16)],
)  # fmt: skip
def test_tma_gpu(shape, dtype, opts):
    from solkit.kernels.softmax.tma import softmax_forward_tma

    x = softmax_inputs(shape, dtype, "cuda")
    y = torch.full_like(x, float("nan"))
    info = softmax_forward_tma(x, y, **opts)
    assert info is not None and info["path"] == "tma"
    assert_softmax_close(y, x)


@pytest.mark.gpu
def test_tma_declines_gpu():
    from solkit.kernels.softmax.tma import softmax_forward_tma

    x = torch.randn(4, 128255, device="cuda", dtype=torch.bfloat16)
    assert softmax_forward_tma(x, torch.empty_like(x)) is None  # not whole 256-column blocks
    x = torch.randn(4, 1024, device="cuda")
    assert softmax_forward_tma(x, torch.empty_like(x)) is None  # fp32


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 128256), (33, 262144)])
def test_packed_fill_bf16_gpu(shape):
    x = softmax_inputs(shape, torch.bfloat16, "cuda")
    assert_softmax_close(softmax_forward(x, path="packed", options={"fill": 1}), x)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,dtype,path",
    [((64, 14336), torch.bfloat16, "rows"), ((257, 14336), torch.float16, "rows"),
     ((300, 128256), torch.bfloat16, "tma"), ((33, 128256), torch.float16, "tma"), ((8, 262144), torch.bfloat16, "tma"),
     ((3, 128255), torch.bfloat16, None)],
)  # fmt: skip
def test_defaults_by_width_gpu(shape, dtype, path):
    """The defaults on a GPU: the rows forward at 14336, the TMA forward at 128256 and 262144 (an odd width takes
    neither), values and gradients through autograd."""
    from solkit.kernels.common.capability import device_caps
    from solkit.kernels.softmax import softmax

    x = softmax_inputs(shape, dtype, "cuda")
    first = plan("fwd", shape[1], dtype, device_caps(x))[0][0]
    assert (first if first in ("rows", "tma") else None) == path
    xg = x.clone().requires_grad_()
    y = softmax(xg)
    assert_softmax_close(y.detach(), x)
    dy = torch.randn_like(x)
    (dx,) = torch.autograd.grad(y, xg, dy)
    yd = torch.softmax(x.double(), -1)
    ref = yd * (dy.double() - (yd * dy.double()).sum(-1, keepdim=True))
    assert (dx.double() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item() + 1e-4
