"""solkit.kernels.softmax.dispatch: single-block and looped (online) paths, values and gradients.

Budget: the kernel's max error is at most 2x torch's own ``torch.softmax`` error in the input dtype,
plus a small atol, against float64. On the CPU (Triton interpreter) the looped path is forced with a
small single-block limit and chunk, so it runs on small odd widths; bf16, vocab-wide rows, 256k rows
and the >2^31-element case are marked gpu.
"""

from __future__ import annotations

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.softmax import Softmax, softmax, softmax_backward, softmax_forward
from solkit.kernels.softmax.split import split_plan

ATOL = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}
#: Named cases: (path, options) of softmax_forward / softmax_backward.
PATHS = {
    "default": (None, None),
    "looped": ("looped", {"block": 128}),
    "looped_noprefetch": ("looped", {"block": 64, "prefetch": False}),
    "single_block_m": ("single", {"block_m": 2, "store_cs": 1}),
    # Split-row path: 2+ segments per row on the CPU's 4 stand-in SMs x 2, 16/32-wide chunks; pass 2 one row
    # behind pass 1 or right after it. In the interpreter the first programs of a group fall back to
    # the whole row (partners not run yet), the last one reads the published partials.
    "split": ("split", {"segment": 64, "chunk": 32, "per_sm": 2}),
    "split_same_row": ("split", {"segment": 48, "chunk": 16, "per_sm": 2, "lookahead": 0}),
    # Packed path (register-held chunks, tagged exchange): 64/256-column chunks, 1-3 row groups. In the
    # interpreter a group's programs run in order: the earlier ones time out at once and compute the row's
    # statistics themselves (the fallback), the last one reads its partners' published words.
    "packed": ("packed", {"block": 256, "groups": 2}),
    "packed_narrow": ("packed", {"block": 64, "groups": 3, "depth": 3}),
    "packed_keep_e": ("packed", {"block": 256, "groups": 1, "keep_e": 1}),
    "packed_late": ("packed", {"block": 128, "groups": 2, "early_load": 0, "skew": 2}),
    "packed_gpu": ("packed", None),
    "packed_gpu_2k": ("packed", {"block": 2048, "num_warps": 4, "per_sm": 4, "keep_e": 1, "skew": 2}),
    "packed_gpu_d3": (
        "packed",
        {"block": 2048, "num_warps": 4, "per_sm": 4, "depth": 3, "l2_prefetch": 2, "hint": 1, "early_load": 1},
    ),
    "packed_gpu_8k": (
        "packed",
        {"block": 8192, "num_warps": 8, "per_sm": 2, "l2_prefetch": 0, "early_load": 0, "keep_e": 0},
    ),
    "packed_gpu_sp1": ("packed", {"block": 16384, "num_warps": 16, "per_sm": 1, "hint": 2, "keep_e": 1}),
    "packed_gpu_sp1_4k": ("packed", {"block": 4096, "num_warps": 4, "per_sm": 4, "hint": 1, "keep_e": 2}),
    "split_gpu": ("split", None),
    "split_gpu_1per_sm": ("split", {"segment": 32768, "chunk": 8192, "num_warps": 32, "per_sm": 1, "lookahead": 0}),
}


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape and out.dtype == torch_out.dtype
    assert torch.isfinite(out).all(), "non-finite output (unwritten element or overflow)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(x, path, device):
    x = x.to(device)
    p, opts = PATHS[path]
    y = softmax_forward(x, path=p, options=opts)
    xr = x.double().requires_grad_()
    y_ref = torch.softmax(xr, -1)
    _assert_close(y, y_ref, torch.softmax(x, -1), ATOL[x.dtype])
    # seeded: a fixed dy per input, so a failure reproduces (the global RNG depends on the tests run before)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(y.numel())).to(y)
    dx = softmax_backward(dy, y, path=p, options=opts)
    (dx_ref,) = torch.autograd.grad(y_ref, xr, dy.double())
    xe = x.clone().requires_grad_()
    (dx_eager,) = torch.autograd.grad(torch.softmax(xe, -1), xe, dy)
    _assert_close(dx, dx_ref, dx_eager, ATOL[x.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 257), (6, 1031), (4, 5, 96), (3, 127)])
@pytest.mark.parametrize(
    "path",
    ["default", "looped", "looped_noprefetch", "single_block_m", "split", "split_same_row", "packed", "packed_narrow",
     "packed_keep_e", "packed_late"],
)  # fmt: skip
def test_softmax_values_and_grads(dtype, shape, path, device):
    if path.startswith(("split", "packed_narrow")) and shape[-1] > 300 and device == "cpu":
        pytest.skip("interpreter: the cooperative fallback re-reads whole rows; the small shapes cover it")
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(*shape, generator=gen) * 4).to(dtype)  # spread wide enough that the max matters
    _check(x, path, device)


def test_split_plan_fills_every_sm():
    """128256-wide rows, 16k-column segments, 2 programs on each of 132 SMs: 8 segments x 33 groups;
    262144-wide rows: 22 x 12 (not 16 x 16 = 256 of the 264 slots)."""
    assert split_plan(4096, 128256, 16384, 264) == (264, 8, 16032)
    grid, segs, seg_len = split_plan(1024, 262144, 16384, 264)
    assert (grid, segs) == (264, 22) and segs * seg_len >= 262144 and seg_len % 16 == 0
    assert split_plan(3, 128256, 16384, 264)[:2] == (48, 16)  # few rows: one group each, more segments
    assert split_plan(4, 10**7, 16384, 264) is None  # more segments than resident programs


@pytest.mark.parametrize("path", ["default", "looped", "split", "packed_narrow"])
def test_masked_rows(path, device):
    """-inf entries (attention masks) get probability 0; a row whose first chunks are all -inf stays finite."""
    x = torch.randn(3, 300, device=device)
    x[0, :250] = -float("inf")
    x[1, 7] = -float("inf")
    p, opts = PATHS[path]
    y = softmax_forward(x, path=p, options=opts)
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-6, atol=1e-7)
    assert torch.equal(y[0, :250], torch.zeros(250, device=device))


def test_autograd_module_and_dim(device):
    x = torch.randn(4, 6, 33, device=device, requires_grad=True)
    y = Softmax(dim=1)(x)
    torch.testing.assert_close(y, torch.softmax(x, 1))
    g = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, g)
    xr = x.detach().requires_grad_()
    (gr,) = torch.autograd.grad(torch.softmax(xr, 1), xr, g)
    torch.testing.assert_close(gx, gr)
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))


def test_bad_inputs(device):
    with pytest.raises(SolkitError, match="dtype"):
        softmax(torch.ones(3, 4, dtype=torch.int64, device=device))
    with pytest.raises(SolkitError, match="dimension"):
        softmax(torch.ones(3, 0, device=device))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (64, 128256), (4, 262144), (1000, 20000)])
def test_softmax_bf16_gpu(shape):
    x = torch.randn(*shape, dtype=torch.bfloat16) * 4
    _check(x, "default", "cuda")


@pytest.mark.gpu
def test_softmax_beyond_int32_elements_gpu():
    n_cols = 128256
    n_rows = 2**31 // n_cols + 8
    if torch.cuda.mem_get_info()[0] < 5 * n_rows * n_cols * 2:
        pytest.skip("not enough free GPU memory for a >2^31-element softmax")
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16) * 4
    y = softmax_forward(x)
    tail = slice(n_rows - 4, n_rows)
    y_ref = torch.softmax(x[tail].double(), -1)
    _assert_close(y[tail], y_ref, torch.softmax(x[tail], -1), ATOL[torch.bfloat16])
    dy = torch.randn_like(x)
    dx = softmax_backward(dy, y)
    dx_ref = y_ref * (dy[tail].double() - (y_ref * dy[tail].double()).sum(-1, keepdim=True))
    torch.testing.assert_close(dx[tail].double(), dx_ref, rtol=2e-2, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["split_gpu", "split_gpu_1per_sm"])
@pytest.mark.parametrize("shape", [(300, 128256), (5, 262144), (1000, 20000)])
def test_softmax_split_bf16_gpu(shape, path):
    """The split-row path on a GPU, where its programs really wait for each other."""
    x = torch.randn(*shape, dtype=torch.bfloat16) * 4
    _check(x, path, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [128256, 262144])
def test_wide_auto_path_gpu(n_cols):
    """The "auto" default on a GPU: split-row exactly when one row per SM overflows the L2 (on the H200,
    132 SMs and 60 MB: 262144-wide bf16 rows split, 128256-wide stay looped), where no optional path (TMA,
    packed) comes first; and the default path is right."""
    from solkit.kernels.common.capability import device_caps
    from solkit.kernels.softmax.plan import plan

    x = torch.randn(48, n_cols, dtype=torch.bfloat16) * 4
    target = device_caps(x.cuda())
    overflows = target.sm_count * n_cols * 2 > target.l2_bytes
    for direction in ("fwd", "bwd"):
        base = [p for p, _ in plan(direction, n_cols, torch.bfloat16, target) if p in ("split", "looped")]
        assert base == (["split", "looped"] if overflows else ["looped"])
    _check(x, "default", "cuda")


def test_packed_timeout_gives_nan_not_a_hang(device):
    """Without the fallback, a program whose partners never publish (the interpreter runs them one by one)
    writes NaN for the row after a bounded spin, and never waits again."""
    if device != "cpu":
        pytest.skip("relies on the interpreter's sequential programs")
    from solkit.kernels.softmax.packed import softmax_forward_packed

    x = torch.randn(3, 200, dtype=torch.float16)
    y = torch.zeros_like(x)
    info = softmax_forward_packed(x, y, block=64, groups=1, fallback=False)
    assert info["split"] == 4 and info["groups"] == 1
    assert torch.isnan(y[:, :192]).all()  # the first programs' chunks (64 columns each): partners ran later
    torch.testing.assert_close(y[:, 192:], torch.softmax(x.float(), -1)[:, 192:].half())  # the last program


@pytest.mark.gpu
@pytest.mark.parametrize(
    "path", ["packed_gpu", "packed_gpu_2k", "packed_gpu_d3", "packed_gpu_8k", "packed_gpu_sp1", "packed_gpu_sp1_4k"]
)
@pytest.mark.parametrize(
    "shape,dtype",
    [((300, 128256), torch.bfloat16), ((1, 128256), torch.bfloat16), ((5, 262144), torch.bfloat16),
     ((33, 262144), torch.bfloat16), ((64, 14336), torch.bfloat16), ((17, 128255), torch.bfloat16),
     ((1000, 20000), torch.float16), ((40, 65537), torch.float32), ((256, 4096), torch.bfloat16)],
)  # fmt: skip
def test_softmax_packed_gpu(shape, dtype, path):
    """The packed path on a GPU (programs really exchange): bf16 vocabulary and 256k-wide rows, one row, an
    odd width (element loads), fp16 and fp32."""
    x = torch.randn(*shape, dtype=dtype) * 4
    _check(x, path, "cuda")


@pytest.mark.gpu
def test_softmax_packed_launches_gpu():
    """On a GPU the packed launcher really launches (no silent fallback to another path): every group of
    programs resident, no spills at the default."""
    from solkit.kernels.softmax.packed import softmax_backward_packed, softmax_forward_packed

    x = torch.randn(512, 128256, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    info = softmax_forward_packed(x, y)
    assert info is not None and info["groups"] >= 1 and info["programs"] == info["groups"] * info["split"]
    assert info["programs"] <= info["resident_per_sm"] * torch.cuda.get_device_properties(0).multi_processor_count
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=1e-5)
    dx = torch.empty_like(x)
    dy = torch.randn_like(x)
    assert softmax_backward_packed(dy, y, dx) is not None


def test_packed_default_by_width():
    """The packed path is the default for 16-bit rows over 16384 wide (both directions) and for the forward
    of 12289-16384-wide rows (one chunk per row); never for fp32 or narrow rows."""
    from solkit.kernels.softmax.packed import default_packed_options as opts

    assert opts("fwd", 128256, torch.bfloat16) == {} and opts("bwd", 262144, torch.float16) == {}
    assert opts("fwd", 14336, torch.bfloat16)["block"] == 16384 and opts("bwd", 14336, torch.bfloat16) is None
    assert opts("fwd", 4096, torch.bfloat16) is None and opts("fwd", 128256, torch.float32) is None
