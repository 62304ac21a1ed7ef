"""solkit.kernels.cross_entropy.dispatch: loss and in-place gradient vs torch, with every option.

Reference: ``F.cross_entropy`` (ignore_index, label_smoothing, reductions) in float64 on softcapped
logits, plus the z-loss ``lam * logsumexp^2`` written here. CPU runs use the Triton interpreter;
bf16, the 128k vocabulary and the >2^31-element case are marked gpu.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.cross_entropy import CrossEntropyLoss, cross_entropy
from solkit.kernels.cross_entropy.dispatch import LAST_LAUNCH, cross_entropy_bytes, scale_grad_rows_

# the two kernels: the two-sweep one with several blocks per row even at small vocabularies, and the
# cooperative split kernel (one chunk per row under the interpreter; softcap always takes the two-sweep one)
PATHS = {"two_sweep": {"split_block": 0, "block": 1024}, "split": {"split_block": 4096}}
SMALL_BLOCK = PATHS["two_sweep"]


def ref_loss(x, y, ignore_index=-100, label_smoothing=0.0, z_loss_scale=0.0, softcap=None, reduction="mean"):
    z = softcap * torch.tanh(x / softcap) if softcap else x
    per_row = F.cross_entropy(z, y, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="none")
    valid = y != ignore_index
    lse = torch.logsumexp(z, dim=-1)
    per_row = per_row + torch.where(valid, z_loss_scale * lse * lse, 0.0)
    if reduction == "none":
        return per_row
    return per_row.sum() / (valid.sum() if reduction == "mean" else 1)


def _check(x, y, atol, config=SMALL_BLOCK, **opts):
    reduction = opts.get("reduction", "mean")
    x64 = x.detach().double().requires_grad_()
    ref = ref_loss(x64, y, **opts)
    go = torch.randn_like(ref) if reduction == "none" else torch.tensor(1.7, dtype=torch.float64)
    (rgrad,) = torch.autograd.grad(ref, x64, go)
    xs = x.detach().clone().requires_grad_()
    loss = cross_entropy(xs, y, config=config, **opts)
    want = "two_sweep" if opts.get("softcap") or not config.get("split_block") else "split"
    assert LAST_LAUNCH["path"] == want
    (grad,) = torch.autograd.grad(loss, xs, go.to(loss.dtype))
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()
    torch.testing.assert_close(loss.double(), ref, atol=atol, rtol=atol)
    torch.testing.assert_close(grad.double(), rgrad, atol=atol, rtol=atol)
    return xs, grad


OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"z_loss_scale": 1e-3},
    {"softcap": 15.0},
    {"label_smoothing": 0.2, "z_loss_scale": 1e-2, "softcap": 30.0},
]


@pytest.mark.parametrize("shape", [(1, 7), (7, 2053), (3, 1024)])
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_fp32_all_options(shape, opts, reduction, path, device):
    torch.manual_seed(shape[1])
    x = (torch.randn(shape) * 4).to(device)
    y = torch.randint(0, shape[1], (shape[0],), device=device)
    if shape[0] > 2:
        y[1] = -100
    xs, grad = _check(x, y, 1e-5, config=PATHS[path], reduction=reduction, **opts)
    assert grad.data_ptr() == xs.data_ptr(), "gradient should be written in place into the logits"


@pytest.mark.parametrize("vocab", [3000, 700])
@pytest.mark.parametrize("stats", [1, 2], ids=["warp", "thread"])
@pytest.mark.parametrize("softcap", [20.0, None], ids=["softcap", "plain"])
def test_row_kernel_warp_statistics(vocab, stats, softcap, device):
    """warp_stats: one running max per warp ([REP, warps, 256] tiles) or per thread ([REP, threads, 8]); a
    short row leaves whole warps with only padding in the first block (their max stays -inf until real
    logits arrive)."""
    torch.manual_seed(vocab)
    x = (torch.randn(5, vocab) * 4).to(device)
    y = torch.randint(0, vocab, (5,), device=device)
    y[1] = -100
    cfg = {"split_block": 0, "block": 1024, "num_warps": 2, "warp_stats": stats, "num_stages": 2}
    opts = {"label_smoothing": 0.1, "softcap": softcap, "z_loss_scale": 1e-3}
    x64 = x.double().requires_grad_()
    ref = ref_loss(x64, y, reduction="none", **opts)
    go = torch.randn_like(ref)
    (rgrad,) = torch.autograd.grad(ref, x64, go)
    xs = x.clone().requires_grad_()
    loss = cross_entropy(xs, y, reduction="none", config=cfg, **opts)
    (grad,) = torch.autograd.grad(loss, xs, go.float())
    torch.testing.assert_close(loss.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad.double(), rgrad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_custom_ignore_index_and_all_ignored(path, device):
    x = torch.randn(4, 37, device=device)
    y = torch.tensor([3, 5, 5, 0], device=device)
    _check(x, y, 1e-5, config=PATHS[path], ignore_index=5, label_smoothing=0.1)
    all_ignored = torch.full((4,), -100, device=device)
    xs = x.clone().requires_grad_()
    loss = cross_entropy(xs, all_ignored, reduction="sum", config=PATHS[path])
    (grad,) = torch.autograd.grad(loss, xs)
    assert loss.item() == 0.0 and (grad == 0).all()


@pytest.mark.parametrize("path", sorted(PATHS))
def test_fp16_logits(path, device):
    torch.manual_seed(1)
    x = (torch.randn(6, 2053) * 3).half().to(device)
    y = torch.randint(0, 2053, (6,), device=device)
    y[2] = -100
    _check(x, y, 2e-3, config=PATHS[path], label_smoothing=0.05, z_loss_scale=1e-4)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_out_of_place_and_forward_only(path, device):
    x = torch.randn(3, 300, device=device)
    y = torch.randint(0, 300, (3,), device=device)
    keep = x.clone()
    xs = x.clone().requires_grad_()
    loss = cross_entropy(xs, y, inplace_grad=False, config=PATHS[path])
    (grad,) = torch.autograd.grad(loss, xs)
    assert torch.equal(xs.detach(), keep), "inplace_grad=False must leave the logits alone"
    x64 = keep.double().requires_grad_()
    (rgrad,) = torch.autograd.grad(F.cross_entropy(x64, y), x64)
    torch.testing.assert_close(grad.double(), rgrad, atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        loss_only = cross_entropy(x, y, config=PATHS[path])
    assert torch.equal(x, keep), "without grad the logits are only read"
    torch.testing.assert_close(loss_only.double(), F.cross_entropy(keep.double(), y), atol=1e-6, rtol=1e-6)


def test_return_z_loss_and_module(device):
    x = torch.randn(2, 3, 50, device=device)
    y = torch.randint(0, 50, (2, 3), device=device)
    mod = CrossEntropyLoss(z_loss_scale=1e-2, return_z_loss=True)
    loss, z = mod(x.clone().requires_grad_(), y)
    lse = torch.logsumexp(x.double().reshape(-1, 50), -1)
    torch.testing.assert_close(z.double(), 1e-2 * (lse * lse).mean(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(loss.double(), ref_loss(x.double().reshape(-1, 50), y.reshape(-1), z_loss_scale=1e-2))


def test_scale_grad_rows_skips_unit_scale(device):
    g = torch.randn(4, 33, device=device)
    keep = g.clone()
    scale_grad_rows_(g, torch.tensor(1.0, device=device))
    assert torch.equal(g, keep)
    per_row = torch.tensor([1.0, 2.0, -1.0, 0.5], device=device)
    scale_grad_rows_(g, per_row)
    torch.testing.assert_close(g, keep * per_row[:, None])


def test_bad_inputs_raise(device):
    x, y = torch.randn(3, 10, device=device), torch.randint(0, 10, (3,), device=device)
    with pytest.raises(SolkitError, match="reduction"):
        cross_entropy(x, y, reduction="avg")
    with pytest.raises(SolkitError, match="targets"):
        cross_entropy(x, y.float())
    with pytest.raises(SolkitError, match="label_smoothing"):
        cross_entropy(x, y, label_smoothing=1.5)
    with pytest.raises(SolkitError, match="softcap"):
        cross_entropy(x, y, softcap=-1.0)
    with pytest.raises(SolkitError, match="logits"):
        cross_entropy(x[None], y)


def test_byte_count():
    assert cross_entropy_bytes(8192, 128256, torch.bfloat16) == 2 * 2 * 8192 * 128256 + 12 * 8192


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("opts", OPTIONS[:1] + OPTIONS[-1:], ids=["plain", "all"])
def test_gpu_llama3_vocab(dtype, opts):
    torch.manual_seed(0)
    x = (torch.randn(64, 128256, device="cuda") * 3).to(dtype)
    y = torch.randint(0, 128256, (64,), device="cuda")
    y[::7] = -100
    x64 = x.detach().double().requires_grad_()
    ref = ref_loss(x64, y, **opts)
    (rgrad,) = torch.autograd.grad(ref, x64)
    xs = x.clone().requires_grad_()
    loss = cross_entropy(xs, y, **opts)  # default (tuned) launch config
    (grad,) = torch.autograd.grad(loss, xs)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(loss.double(), ref, atol=tol, rtol=tol)
    # the stored gradient is rounded to the logits dtype: compare against the rounded reference
    torch.testing.assert_close(grad.double(), rgrad.to(dtype).double(), atol=tol * 1e-3, rtol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "cfg",
    [
        {"warp_stats": 1, "block": 16384, "num_stages": 3},
        {"warp_stats": 1, "block": 4096, "num_warps": 8, "num_stages": 4, "programs_per_sm": 2},
        {"block": 4096, "num_warps": 8, "num_stages": 4, "programs_per_sm": 0},  # one program per row
    ],
)
def test_gpu_configs_in_place(cfg):
    torch.manual_seed(3)
    x = (torch.randn(300, 128256, device="cuda") * 3).to(torch.bfloat16)
    y = torch.randint(0, 128256, (300,), device="cuda")
    y[::5] = -100
    x64 = x.double().requires_grad_()
    ref = ref_loss(x64, y, label_smoothing=0.1, z_loss_scale=1e-4)
    (rgrad,) = torch.autograd.grad(ref, x64)
    xs = x.clone().requires_grad_()
    loss = cross_entropy(
        xs, y, label_smoothing=0.1, z_loss_scale=1e-4, config={"num_warps": 16, "split_block": 0, **cfg}
    )
    assert LAST_LAUNCH["path"] == "two_sweep"
    (grad,) = torch.autograd.grad(loss, xs)
    assert grad.data_ptr() == xs.data_ptr()
    torch.testing.assert_close(loss.double(), ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(grad.double(), rgrad.to(torch.bfloat16).double(), atol=1e-8, rtol=1e-2)


@pytest.mark.gpu
def test_gpu_more_than_2_31_elements():
    rows, vocab = 17_000, 128256  # 2.18e9 logits: 64-bit row offsets required
    x = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(0, vocab, (rows,), device="cuda")
    tail = x[-4:].float()
    xs = x.requires_grad_()
    loss = cross_entropy(xs, y, reduction="none")
    torch.testing.assert_close(loss[-4:], F.cross_entropy(tail, y[-4:], reduction="none"), atol=1e-3, rtol=1e-3)
    (grad,) = torch.autograd.grad(loss.sum(), xs)
    ref = torch.softmax(tail, -1) - F.one_hot(y[-4:], vocab).float()
    torch.testing.assert_close(grad[-4:].float(), ref, atol=1e-4, rtol=2e-2)
