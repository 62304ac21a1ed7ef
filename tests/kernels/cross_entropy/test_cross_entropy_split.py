"""solkit.kernels.cross_entropy.split: the cooperative one-read cross-entropy kernel.

On the CPU (Triton interpreter, programs run one after another) only rows of one chunk can pass the
barrier: those run here, with the persistent row loop, the register prefetch and both gradient forms;
a chunked row there must time out into NaN instead of hanging. Chunked rows (the real kernel) run on
the GPU tests, against a float64 reference.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.common.exchange import chunk_layout, programs_per_sm
from solkit.kernels.cross_entropy import cross_entropy
from solkit.kernels.cross_entropy.dispatch import CE_CONFIG, LAST_LAUNCH
from solkit.kernels.cross_entropy.split import launch_cross_entropy_split


def reference(x, y, ignore_index=-100, label_smoothing=0.0, z_loss_scale=0.0, reduction="mean"):
    """float64 loss and its gradient (unit upstream gradient for mean/sum, a fixed random one for none)."""
    x64 = x.detach().double().requires_grad_()
    per_row = F.cross_entropy(x64, y, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="none")
    valid = y != ignore_index
    lse = torch.logsumexp(x64, -1)
    per_row = per_row + torch.where(valid, z_loss_scale * lse * lse, 0.0)
    loss = {"none": per_row, "sum": per_row.sum(), "mean": per_row.sum() / valid.sum()}[reduction]
    go = torch.linspace(-1, 2, per_row.numel(), dtype=torch.float64, device=x.device) if reduction == "none" else None
    (grad,) = torch.autograd.grad(loss, x64, go)
    return loss, grad, go


@pytest.mark.parametrize("n_cols", [1, 7, 16, 100, 1000, 5000, 50257, 128256, 151936, 256000])
@pytest.mark.parametrize("block", [1024, 8192, 16384])
def test_chunk_layout_covers_the_row(n_cols, block):
    split, chunk, blk = chunk_layout(n_cols, block)
    assert chunk % 16 == 0 and chunk <= blk and blk & (blk - 1) == 0
    assert blk <= max(block, 16)
    assert split * chunk >= n_cols > (split - 1) * chunk  # no empty chunk
    assert split <= math.ceil(n_cols / block)  # as few chunks as the block allows


def test_chunk_layout_llama3():
    assert chunk_layout(128256, 16384) == (8, 16032, 16384)
    assert chunk_layout(128256, 8192) == (16, 8016, 8192)


def test_programs_per_sm_limits():
    assert min(programs_per_sm(64, 4096, 16).values()) == 2  # 64 regs x 512 threads = half the register file
    assert programs_per_sm(65, 4096, 16)["regs"] == 1  # 65 rounds up to 72 per thread
    assert programs_per_sm(32, 0, 4)["threads"] == 16
    assert programs_per_sm(32, 100 * 1024, 4)["smem"] == 2
    assert programs_per_sm(16, 0, 1)["blocks"] == 32


def _launch(x, y, opts, reduction="mean", **kw):
    n = x.shape[0]
    losses, lse = torch.empty(n, device=x.device), torch.empty(n, device=x.device)
    grad = x.clone()
    ignore = opts.get("ignore_index", -100)
    info = launch_cross_entropy_split(
        x, y, losses, lse, (y != ignore).sum(), grad=grad, mean=reduction == "mean", ignore_index=ignore,
        label_smoothing=opts.get("label_smoothing", 0.0), z_loss_scale=opts.get("z_loss_scale", 0.0), **kw,
    )  # fmt: skip
    return info, losses, lse, grad


@pytest.mark.parametrize("keep_exp", [True, False])
@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1, "z_loss_scale": 1e-2}], ids=["plain", "all"])
def test_persistent_rows_one_chunk(keep_exp, prefetch, opts, device):
    """Two groups walk 7 rows (an ignored one among them), one chunk per row: no barrier."""
    torch.manual_seed(5)
    x = (torch.randn(7, 1500) * 4).to(device)
    y = torch.randint(0, 1500, (7,), device=device)
    y[4] = -100
    info, losses, lse, grad = _launch(x, y, opts, block=2048, keep_exp=keep_exp, prefetch=prefetch, groups=2)
    assert info["split"] == 1 and info["groups"] == 2
    ref, rgrad, _ = reference(x, y, reduction="none", **opts)
    torch.testing.assert_close(losses.double(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double()[y != -100], torch.logsumexp(x.double(), -1)[y != -100])
    _, rgrad_mean, _ = reference(x, y, **opts)
    torch.testing.assert_close(grad.double(), rgrad_mean, atol=1e-6, rtol=1e-5)
    assert (grad[4] == 0).all() and losses[4] == 0


def test_barrier_timeout_gives_nan_not_a_hang(device):
    """Under the interpreter a chunked row's peers never run alongside: the bounded spin must end in NaN."""
    if device == "cuda":
        pytest.skip("the interpreter's sequential programs are what makes the barrier unreachable")
    x = torch.randn(3, 700)
    y = torch.randint(0, 700, (3,))
    info, losses, _, _ = _launch(x, y, {}, block=256, max_spins=4, groups=1)
    assert info["split"] == 3
    assert torch.isnan(losses).all()


@pytest.mark.parametrize("barrier", ["tagged", "counted", "reread", "packed", "packed_full_late", "lean", "lean_full"])
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1, "z_loss_scale": 1e-2}], ids=["plain", "all"])
def test_chunked_rows_last_program_math(barrier, opts, device):
    """The interpreter runs a group's programs in order, so the last chunk's program finds every peer's
    partials already published (the earlier ones timed out waiting, which flags NaN): its gradient
    columns test the cross-chunk combination, the 64-bit tags, the target fix and the row pipelines. Each
    group walks as many rows as there are partial slots (2 + 2 * skew), so no slot is reused before the
    last program reads it."""
    if device == "cuda":
        pytest.skip("relies on the interpreter's sequential programs")
    skew = {"reread": 3, "packed": 4, "packed_full_late": 4, "lean": 5, "lean_full": 5}.get(barrier, 0)
    full = barrier.endswith(("_full", "_full_late"))  # chunks of 256, 256, 188 columns, unmasked but the last
    extra = {"full_chunks": True, "early_load": False, "unroll": 2} if full else {}
    rows = 2 * (4 if skew else 2)  # 2 x the partial slots
    torch.manual_seed(11 + skew)
    x = torch.randn(rows, 700) * 4
    if skew >= 2:  # these kernels read 16-bit logits as packed pairs (fp16 here: the interpreter's bf16 is off)
        x = x.half()
    y = torch.randint(0, 700, (rows,))
    y[0], y[1], y[2] = 650, 3, -100  # a target in the last chunk, one in the first, an ignored row
    y[3] = 699
    info, losses, _, grad = _launch(x, y, opts, block=256, max_spins=2, groups=2, tagged=barrier != "counted",
                                    skew=skew, **extra)  # fmt: skip
    assert info["split"] == 3 and info["chunk_cols"] == (256 if full else 240) and info["skew"] == skew
    assert torch.isnan(losses).all()  # the earlier programs timed out: flagged
    _, rgrad, _ = reference(x, y, **opts)
    last = slice(512 if full else 480, 700)
    tol = {"atol": 1e-6, "rtol": 2e-3} if skew >= 2 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(grad[:, last].double(), rgrad[:, last], **tol)


def test_interpreter_falls_back_for_chunked_rows(device):
    if device == "cuda":
        pytest.skip("CPU behaviour")
    x = torch.randn(2, 5000)
    y = torch.randint(0, 5000, (2,))
    loss = cross_entropy(x.clone().requires_grad_(), y, config={"split_block": 1024})
    assert LAST_LAUNCH["path"] == "two_sweep"
    torch.testing.assert_close(loss.double(), F.cross_entropy(x.double(), y), atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------- GPU
SPLIT_CONFIGS = [
    {"split_block": 16384, "split_warps": 16, "split_programs_per_sm": 1, "split_skew": 0, "split_keep_exp": 1},
    {"split_block": 16384, "split_warps": 16, "split_programs_per_sm": 2, "split_skew": 0, "split_keep_exp": 0,
     "split_maxnreg": 64, "split_tagged": 0},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 8, "split_skew": 0, "split_keep_exp": 0,
     "split_prefetch": 0},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 3},
    {"split_block": 16384, "split_warps": 16, "split_programs_per_sm": 1, "split_skew": 3},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 4, "split_pass2_bf16": 1},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 4, "split_pass2_bf16": 0},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 4, "split_early_load": 0,
     "split_unroll": 2},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 3, "split_unroll": 3},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 5, "split_unroll": 2},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 5, "split_unroll": 2,
     "split_full_chunks": 1, "split_pass2_bf16": 0},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 4, "split_l2_prefetch": 2},
    {"split_block": 2048, "split_warps": 2, "split_programs_per_sm": 8, "split_skew": 4, "split_l2_prefetch": 1},
    {"split_block": 4096, "split_warps": 4, "split_programs_per_sm": 4, "split_skew": 5, "split_unroll": 2,
     "split_l2_prefetch": 2},
]  # fmt: skip
REREAD = {"split_block": 16384, "split_warps": 16, "split_programs_per_sm": 1, "split_skew": 3}
LEAN = {
    "split_block": 4096,
    "split_warps": 4,
    "split_programs_per_sm": 4,
    "split_skew": 5,
    "split_unroll": 2,
    "split_pass2_bf16": 1,
}  # the bf16x2 pass 2 (1.5 % off on 2 of 1.5e8 gradients in round 1: tolerance 2e-2)
PLAIN = SPLIT_CONFIGS[0]


def _gpu_check(rows, vocab, dtype, opts, reduction="mean", config=None, seed=0, skew=None):
    torch.manual_seed(seed)
    x = (torch.randn(rows, vocab, device="cuda") * 3).to(dtype)
    y = torch.randint(0, vocab, (rows,), device="cuda")
    if rows > 2:
        y[:: max(rows // 5, 2)] = opts.get("ignore_index", -100)
    ref, rgrad, go = reference(x, y, reduction=reduction, **opts)
    xs = x.clone().requires_grad_()
    loss = cross_entropy(xs, y, reduction=reduction, config=config, **opts)
    assert LAST_LAUNCH["path"] == "split", LAST_LAUNCH
    if skew is not None:
        assert LAST_LAUNCH["skew"] == skew, LAST_LAUNCH
    assert (
        LAST_LAUNCH["programs"]
        <= LAST_LAUNCH["resident_per_sm"] * torch.cuda.get_device_properties(0).multi_processor_count
    )
    (grad,) = torch.autograd.grad(loss, xs, None if go is None else go.float())
    assert grad.data_ptr() == xs.data_ptr()
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(loss.double(), ref.detach(), atol=tol, rtol=tol)
    # the stored gradient is rounded to the logits' dtype: compare with the rounded reference
    # the bf16x2 pass 2 of the packed kernels rounds e, the row's scale and the result to bf16: up to ~3 roundings
    bf16x2 = dtype == torch.bfloat16 and (config or CE_CONFIG).get("split_pass2_bf16", 0)
    torch.testing.assert_close(grad.double(), rgrad.to(dtype).double(), atol=tol * 1e-3, rtol=2e-2 if bf16x2 else tol)


@pytest.mark.gpu
@pytest.mark.parametrize("config", SPLIT_CONFIGS, ids=lambda c: "-".join(f"{k[6:]}{v}" for k, v in c.items()))
def test_gpu_split_configs(config):
    _gpu_check(300, 128256, torch.bfloat16, {"label_smoothing": 0.1, "z_loss_scale": 1e-4}, config=config)


ALL_OPTS = {"label_smoothing": 0.05, "z_loss_scale": 1e-3, "ignore_index": 7}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "rows,vocab,dtype,reduction,opts",
    [(1, 128256, torch.bfloat16, "mean", {}), (3, 32000, torch.float16, "sum", ALL_OPTS),
     (1000, 151936, torch.bfloat16, "none", {}), (257, 128256, torch.float32, "mean", ALL_OPTS),
     (129, 50257, torch.bfloat16, "mean", ALL_OPTS), (64, 256000, torch.bfloat16, "none", ALL_OPTS)],
)  # fmt: skip
@pytest.mark.parametrize("config", [None, PLAIN, REREAD, LEAN], ids=["default", "plain", "reread", "lean"])
def test_gpu_split_shapes_and_options(rows, vocab, dtype, reduction, opts, config):
    # the reread and packed kernels need 16-bit logits of even length, else the launcher takes skew 0
    skew = (config or CE_CONFIG)["split_skew"] if dtype != torch.float32 and vocab % 2 == 0 else 0
    _gpu_check(rows, vocab, dtype, opts, reduction=reduction, seed=rows, config=config, skew=skew)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [PLAIN, REREAD], ids=["plain", "reread"])
def test_gpu_split_forward_only_and_repeat(config):
    """No grad (the split kernel asked for: ``split_block`` set): the logits are only read; a second call
    (fresh buffers) gives the same loss bit for bit."""
    torch.manual_seed(2)
    x = (torch.randn(2048, 128256, device="cuda") * 2).to(torch.bfloat16)
    y = torch.randint(0, 128256, (2048,), device="cuda")
    keep = x.clone()
    with torch.no_grad():
        a = cross_entropy(x, y, config=config)
        assert LAST_LAUNCH["path"] == "split"
        b = cross_entropy(x, y, config=config)
    assert torch.equal(x, keep) and torch.equal(a, b)
    torch.testing.assert_close(a.double(), F.cross_entropy(x.double(), y), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_gpu_default_more_than_2_31_elements():
    rows, vocab = 17_000, 128256  # 2.18e9 logits: 64-bit row offsets required
    x = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(0, vocab, (rows,), device="cuda")
    tail = x[-4:].float()
    xs = x.requires_grad_()
    loss = cross_entropy(xs, y, reduction="none")  # the default split kernel
    assert LAST_LAUNCH["path"] == "split" and LAST_LAUNCH["skew"] == CE_CONFIG["split_skew"]
    torch.testing.assert_close(loss[-4:], F.cross_entropy(tail, y[-4:], reduction="none"), atol=1e-3, rtol=1e-3)
    (grad,) = torch.autograd.grad(loss.sum(), xs)
    ref = torch.softmax(tail, -1) - F.one_hot(y[-4:], vocab).float()
    torch.testing.assert_close(grad[-4:].float(), ref, atol=1e-4, rtol=2e-2)


def _slot_reuse_violations(skew: int, slots: int, programs: int = 3, arrivals: int = 12, trials: int = 300) -> int:
    """Random interleavings of a group's programs running the kernels' order (prologue: publish 0..skew-1;
    iteration j: publish j + skew, wait until every peer published j, read j): count publications that
    overwrite a slot whose previous arrival some peer has not read yet."""
    import random

    rng = random.Random(skew * 100 + slots)
    bad = 0
    for _ in range(trials):
        # per program: a list of steps ("pub", a) / ("read", a); the read waits for all peers' "pub" of a
        steps = []
        for _p in range(programs):
            prog = [("pub", a) for a in range(min(skew, arrivals))]
            for j in range(arrivals):
                if j + skew < arrivals:
                    prog.append(("pub", j + skew))
                prog.append(("read", j))
            steps.append(prog)
        pos = [0] * programs
        published = [set() for _ in range(programs)]
        read = [set() for _ in range(programs)]
        while any(pos[p] < len(steps[p]) for p in range(programs)):
            runnable = [p for p in range(programs) if pos[p] < len(steps[p])
                        and (steps[p][pos[p]][0] == "pub" or all(steps[p][pos[p]][1] in published[q]
                                                                 for q in range(programs)))]  # fmt: skip
            p = rng.choice(runnable)
            kind, a = steps[p][pos[p]]
            if kind == "pub":
                old = a - slots
                if old >= 0 and any(old not in read[q] for q in range(programs)):
                    bad += 1
                published[p].add(a)
            else:
                read[p].add(a)
            pos[p] += 1
    return bad


@pytest.mark.parametrize("skew", [0, 1, 2])
def test_partial_slots_suffice_for_the_skew(skew):
    """2 + 2 * skew slots (what the launcher allocates) are never overwritten before every peer read them;
    one fewer is (the round-2 stalls of the first skewed kernels, which had 3 and 4)."""
    assert _slot_reuse_violations(skew, 2 + 2 * skew) == 0
    assert _slot_reuse_violations(skew, 1 + 2 * skew) > 0


def test_removed_skews_raise():
    x = torch.randn(2, 64)
    y = torch.randint(0, 64, (2,))
    with pytest.raises(SolkitError, match="skew"):
        _launch(x, y, {}, block=32, skew=1, groups=1)
