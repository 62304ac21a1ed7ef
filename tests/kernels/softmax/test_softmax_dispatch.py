"""solkit.kernels.softmax.dispatch / plan: ``path=`` and ``options=``, and the default path by shape, dtype and device
(a pure planning function: no GPU needed to check what a GPU call would take)."""

from __future__ import annotations

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.common.capability import INTERPRETER_CAPS, caps_for_product
from solkit.kernels.softmax import plan as plan_module
from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward
from solkit.kernels.softmax.plan import BACKWARD_PATHS, FORWARD_PATHS, default_path, plan

CPU = INTERPRETER_CAPS
H200 = caps_for_product("h200-sxm")  # 132 SMs, 60 MiB of L2 (as the live device reports)
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32

#: (direction, n_cols, dtype, device) -> the first path tried with no path asked for. The GPU rows are the H200's
#: measured defaults (configs.yaml); on the CPU (the interpreter) only single-block and looped.
DEFAULTS = [
    ("fwd", 4096, BF16, H200, "single"),
    ("fwd", 12288, BF16, H200, "single"),
    ("fwd", 14336, BF16, H200, "rows"),
    ("fwd", 14336, FP32, H200, "single"),
    ("fwd", 16384, FP16, H200, "rows"),
    ("fwd", 14335, BF16, H200, "packed"),  # does not tile: the one-chunk packed forward
    ("fwd", 20000, BF16, H200, "packed"),
    ("fwd", 128256, BF16, H200, "tma"),
    ("fwd", 128255, BF16, H200, "packed"),  # not whole 256-column blocks
    ("fwd", 262144, BF16, H200, "tma"),
    ("fwd", 128256, FP32, H200, "split"),  # fp32: one row per SM (68 MB) overflows the L2
    ("fwd", 65536, FP32, H200, "looped"),
    ("fwd", 128256, BF16, CPU, "looped"),
    ("fwd", 14336, BF16, CPU, "single"),
    ("bwd", 4096, BF16, H200, "single"),
    ("bwd", 14336, BF16, H200, "single"),
    ("bwd", 20000, FP16, H200, "packed"),
    ("bwd", 128256, BF16, H200, "packed"),
    ("bwd", 262144, FP32, H200, "split"),
    ("bwd", 128256, FP16, CPU, "looped"),
]


@pytest.mark.parametrize("direction,n_cols,dtype,target,expected", DEFAULTS)
def test_default_path(direction, n_cols, dtype, target, expected):
    assert default_path(direction, n_cols, dtype, target) == expected


def test_default_launch_options():
    """The defaults carry the measured launch options (configs.yaml), and the base path always ends the list."""
    chain = plan("fwd", 128256, BF16, H200)
    assert chain[0] == ("tma", {"blocks": 16, "num_warps": 2, "per_sm": 6, "stages": 2, "l2_prefetch": 1,
                                "word1": 2, "backoff": 100})  # fmt: skip
    assert [p for p, _ in chain] == ["tma", "packed", "looped"]
    assert plan("fwd", 14336, BF16, H200)[1] == ("packed", {"block": 16384, "num_warps": 16, "per_sm": 1, "keep_e": 2,
                                                            "hint": 1})  # fmt: skip
    assert [p for p, _ in plan("fwd", 262144, BF16, H200)] == ["tma", "packed", "split", "looped"]


def test_explicit_path_order():
    """A path asked for comes first; optional paths before it are skipped, those after it keep their defaults; a
    split-row launch that cannot be resident leaves the looped path."""
    assert [p for p, _ in plan("fwd", 128256, BF16, H200, "rows")] == ["packed", "looped"]  # rows do not tile
    assert [p for p, _ in plan("fwd", 14336, BF16, H200, "rows", {"depth": 2})] == ["rows", "packed", "single"]
    assert [p for p, _ in plan("fwd", 128256, BF16, H200, "packed")] == ["packed", "looped"]
    assert plan("fwd", 96, FP32, CPU, "split", {"segment": 64}) == [("split", {"segment": 64}), ("looped", {})]
    assert plan("bwd", 96, FP32, CPU, "looped", {"block": 32}) == [("looped", {"block": 32})]
    assert plan("fwd", 96, FP32, CPU, "single") == [("single", {})]


@pytest.mark.parametrize("path", ["coop", "reread", "gluon", "Looped"])
def test_unknown_path_raises(path):
    x = torch.randn(2, 8)
    with pytest.raises(SolkitError, match=repr(path)):
        softmax_forward(x, path=path)
    with pytest.raises(SolkitError, match=repr(path)):
        softmax_backward(x, x, path=path)


def test_forward_only_paths_and_bad_options():
    x = torch.randn(2, 8)
    for path in sorted(set(FORWARD_PATHS) - set(BACKWARD_PATHS)):
        with pytest.raises(SolkitError, match="unknown path"):
            softmax_backward(x, x, path=path)
    with pytest.raises(SolkitError, match="need a path"):
        softmax_forward(x, options={"block": 64})
    with pytest.raises(SolkitError, match="unknown options"):
        softmax_forward(x, path="looped", options={"blocks": 64})


def test_config_patch_changes_the_default(monkeypatch):
    """The tuned settings are the module's loaded dicts: a test (or a sweep) may patch them."""
    monkeypatch.setitem(plan_module.SINGLE, "max_cols", 64)
    assert default_path("fwd", 96, FP32, CPU) == "looped"
    monkeypatch.setitem(plan_module.SPLIT_CONFIG["fwd"], "default", True)
    assert default_path("fwd", 96, FP32, H200) == "split"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(3, 97), (2, 3, 130)])
@pytest.mark.parametrize("path,options", [(None, None), ("single", {"num_warps": 2}), ("looped", {"block": 32})])
def test_paths_agree(dtype, shape, path, options, device):
    x = (torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 4).to(device=device, dtype=dtype)
    y = softmax_forward(x, path=path, options=options)
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-3, atol=1e-4)
    dy = torch.randn_like(x)
    dx = softmax_backward(dy, y, path=path, options=options)
    yd, dyd = y.double(), dy.double()
    torch.testing.assert_close(dx.double(), yd * (dyd - (yd * dyd).sum(-1, keepdim=True)), rtol=1e-2, atol=2e-3)
