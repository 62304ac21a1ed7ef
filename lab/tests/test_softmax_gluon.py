"""The warp-specialised Gluon softmax forward (lab.kernels.softmax_gluon): correctness on the GPU against float64
over every row (NaN-poisoned outputs) at 1, odd and 1000 rows of 65536-262144 columns, its launch knobs, the
bounded spin, and where the launcher declines. Gluon does not run in the interpreter: on the CPU only the
launch plan and the declines are checked."""

from __future__ import annotations

import pytest
import torch
from lab.kernels import softmax_gluon as G

GPU = torch.cuda.is_available() and G.unavailable_reason() is None


def _check(x: torch.Tensor, **opts) -> dict:
    y = torch.full_like(x, float("nan"))
    facts = G.softmax_forward_gluon(x, y, **opts)
    assert facts is not None, "the launcher declined"
    ref = torch.softmax(x.double(), -1)
    eager_err = float((torch.softmax(x, -1).double() - ref).abs().max())
    err = (y.double() - ref).abs()
    budget = 2 * eager_err + 1e-3 * float(ref.abs().max())
    assert bool(torch.isfinite(y).all()), "non-finite outputs (an unwritten or timed-out row)"
    assert float(err.max()) <= budget, (float(err.max()), budget, facts)
    return facts


@pytest.mark.parametrize("n_cols", [256, 65536, 128256, 262144, 1000 * 256])
@pytest.mark.parametrize("sms", [132, 114])
def test_plan_covers_the_row(n_cols: int, sms: int) -> None:
    p = G.plan(n_cols, sms)
    assert p is not None
    n_blocks = n_cols // 256
    # balanced chunks [c B / S, (c + 1) B / S) fit in the boxes of a slot, and the ring fits in shared memory
    sizes = [(c + 1) * n_blocks // p["split"] - c * n_blocks // p["split"] for c in range(p["split"])]
    assert sum(sizes) == n_blocks and max(sizes) <= p["nbox"] * p["box"]
    assert p["stages"] * p["slot_bytes"] <= G.SMEM_PER_BLOCK and p["stages"] >= 2
    assert p["groups"] * p["split"] <= sms * p["per_sm"]


@pytest.mark.parametrize("n_blocks", [1, 7, 256, 257, 501, 1024, 1031])
@pytest.mark.parametrize("split,box,nbox", [(12, 32, 2), (11, 16, 3), (33, 16, 1), (22, 8, 3), (6, 64, 1), (3, 8, 1)])
def test_boxes_use_every_block_once(n_blocks: int, split: int, box: int, nbox: int) -> None:
    # the kernel's box placement (_box_start) and masks (_box_blocks), mirrored: every block of the row is used
    # by exactly one (chunk, box) lane, and no box reads a block of another chunk unless the chunk is shorter
    # than one box
    split = min(split, n_blocks)
    used = [0] * n_blocks
    for c in range(split):
        b0, b1 = c * n_blocks // split, (c + 1) * n_blocks // split
        if b1 - b0 > nbox * box:
            continue  # the launch plan never picks a box layout that cannot hold the chunk
        for k in range(nbox):
            start = min(b0 + k * box, max(b1 - box, b0))
            if b1 - b0 >= box:
                assert b0 <= start and start + box <= b1
            for g in range(start, start + box):
                if b0 + k * box <= g < b1:
                    used[g] += 1
    if -(-n_blocks // split) <= nbox * box:
        assert used == [1] * n_blocks


@pytest.mark.parametrize("n_cols", [256, 65536, 65792, 128256, 262144])
def test_aligned_plan_covers_the_row(n_cols: int) -> None:
    # aligned chunks: nbox x box blocks, the row's last one shorter but not empty, every resident slot counted
    p = G.plan(n_cols, 132, align=1, per_sm=1)
    n_blocks, chunk = n_cols // 256, p["box"] * p["nbox"]
    assert p["align"] == 1 and p["chunk_blocks"] == chunk
    assert (p["split"] - 1) * chunk < n_blocks <= p["split"] * chunk
    assert p["groups"] * p["split"] <= 132 and p["stages"] * p["slot_bytes"] <= G.SMEM_PER_BLOCK


def test_plan_explicit_knobs() -> None:
    p = G.plan(128256, 132, split=33, box=16, per_sm=1)
    assert (p["split"], p["box"], p["nbox"], p["groups"]) == (33, 16, 1, 4)
    p2 = G.plan(128256, 132, per_sm=2, split=12, box=16)
    assert p2["stages"] * p2["slot_bytes"] <= G.SMEM_PER_SM // 2
    assert G.plan(128256, 132, box=64, stages=100) is None  # more slots than shared memory holds


def test_declines_on_cpu() -> None:
    x = torch.randn(4, 512)
    assert G.softmax_forward_gluon(x.bfloat16(), torch.empty(4, 512, dtype=torch.bfloat16)) is None
    assert G.unavailable_reason() is not None or torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs sm_90 with Gluon")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n_rows", [1, 7, 1000])
@pytest.mark.parametrize("n_cols", [65536, 65792, 128256, 262144])
def test_forward_matches_fp64(dtype, n_rows: int, n_cols: int) -> None:
    torch.manual_seed(n_rows * 7 + n_cols)
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype) * 4
    _check(x)  # the defaults: aligned chunks, kept exponentials, 3 programs an SM
    _check(x, align=0, keep_e=0, per_sm=1)  # balanced chunks, two exponentials an element, 1 an SM
    _check(x, align=1, keep_e=1, mode=1, per_sm=2)  # kept exponentials, two compute partitions, 2 an SM


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs sm_90 with Gluon")
@pytest.mark.parametrize(
    "opts",
    [dict(split=33, box=16), dict(lag=0), dict(lag=2), dict(warps=8), dict(per_sm=2, split=12, box=16),
     dict(split=22, box=8), dict(stages=3), dict(hint=0), dict(mode=1), dict(mode=1, stats_warps=8),
     dict(mode=1, split=33, box=16), dict(mode=1, per_sm=2, split=12, box=16), dict(align=1),
     dict(align=1, lag=0), dict(align=1, box=8), dict(align=1, mode=1), dict(align=1, per_sm=2),
     dict(align=1, keep_e=1), dict(align=1, keep_e=1, per_sm=2), dict(align=1, keep_e=1, per_sm=3),
     dict(align=1, keep_e=1, mode=1), dict(align=1, keep_e=1, mode=1, per_sm=2), dict(keep_e=1)],
)  # fmt: skip
def test_knobs(opts: dict) -> None:
    torch.manual_seed(1)
    x = torch.randn(333, 128256, device="cuda", dtype=torch.bfloat16) * 4
    _check(x, **{"align": 0, "keep_e": 0, "per_sm": 1, **opts})  # over the first defaults, as measured


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs sm_90 with Gluon")
def test_strided_rows_and_extremes() -> None:
    base = torch.randn(64, 128256 + 512, device="cuda", dtype=torch.bfloat16) * 4
    x = base[:, :128256]  # row stride 128768: rows 16-byte aligned, not contiguous
    x[3] = -float("inf")
    x[3, 5] = 1.0  # one finite value: y = one-hot
    x[4, :1000] = 80.0  # large values: the max subtraction matters
    ref = torch.softmax(x.double(), -1)
    for opts in ({}, {"align": 1, "keep_e": 1, "mode": 1, "per_sm": 2}):
        y = torch.full_like(x, float("nan"))
        assert G.softmax_forward_gluon(x, y, **opts) is not None
        assert float((y.double() - ref).abs().max()) < 5e-3, opts
        assert float(y[3, 5]) == 1.0, opts


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs sm_90 with Gluon")
def test_bounded_spin_never_hangs() -> None:
    # a budget of 0 re-reads: a row whose partners are late is written as NaN, the call always returns
    x = torch.randn(200, 128256, device="cuda", dtype=torch.bfloat16)
    y = torch.zeros_like(x)
    assert G.softmax_forward_gluon(x, y, max_spins=0) is not None
    torch.cuda.synchronize()
    good = torch.isfinite(y).all(-1)
    ref = torch.softmax(x.double(), -1)
    if bool(good.any()):
        assert float((y[good].double() - ref[good]).abs().max()) < 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs sm_90 with Gluon")
def test_declines_unsupported_on_gpu() -> None:
    x = torch.randn(8, 65536, device="cuda")
    assert G.softmax_forward_gluon(x, torch.empty_like(x)) is None  # fp32
    xb = torch.randn(8, 65536 + 128, device="cuda", dtype=torch.bfloat16)
    assert G.softmax_forward_gluon(xb, torch.empty_like(xb)) is None  # width not a multiple of 256
    xo = torch.randn(8, 65536 + 8, device="cuda", dtype=torch.bfloat16)[:, 4:65540]
    assert G.softmax_forward_gluon(xo, torch.empty(8, 65536, device="cuda", dtype=torch.bfloat16)) is None


def test_stat_slots_outlast_the_ring() -> None:
    # a program publishes row i only after its own pass 2 of row i - STAGES (mode 1): the words of a row a slow
    # partner may still read must not be overwritten, so the slots rotate over at least 2 STAGES rows
    for stages in range(2, G.MAX_STAGES + 1):
        n = G.stat_slots(stages)
        assert n >= max(16, 2 * stages) and n & (n - 1) == 0
