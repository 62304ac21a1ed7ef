"""The optimizer of a train_step as given: multi-tensor and fused AdamW counted and attributed, a user's own."""

from __future__ import annotations

import pytest
import torch

from solkit.model import analyze


def _mlp(width=24, hidden=40):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))
    return model, torch.randn(6, width)


def _optimizer_rows(rep):
    return [r for r in rep.rows if r.category == "optimizer" and r.kind != "unattributed"]


@pytest.mark.parametrize("impl,ops", [("foreach", {"_foreach_lerp", "_foreach_addcmul", "_foreach_addcdiv"}),
                                      ("fused", {"_fused_adamw"})])  # fmt: skip
def test_adamw_as_pytorch_runs_it(impl, ops):
    model, x = _mlp()
    rep = analyze(model, x, mode="train_step", optimizer=impl, arch="h200-sxm", warmup=1)
    assert rep.meta["optimizer"] == f"AdamW ({impl})"
    rows = _optimizer_rows(rep)
    assert ops <= {r.op for r in rows} and all(r.match for r in rows)  # each with its work
    n = sum(p.numel() for p in model.parameters())
    if impl == "fused":  # by hand: 13 FLOPs + 1 for the decoupled weight decay (AdamW's default 0.01)
        fused = next(r for r in rows if r.op == "_fused_adamw")
        assert fused.flops == {"fp32_vector": 14 * n}
        assert fused.bytes == 4 * n * (3 + 1 + 3) + 4 * 4  # state and grads read, state written; 4 counters
    else:  # every parameter element once per pass: lerp over exp_avg (3 FLOPs)
        lerp = next(r for r in rows if r.op == "_foreach_lerp")
        assert lerp.flops == {"fp32_vector": 3 * n} and lerp.bytes == 4 * n * 3  # exp_avg, grad read; exp_avg written


def test_a_users_optimizer_as_given():
    model, x = _mlp()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    rep = analyze(model, x, mode="train_step", optimizer=sgd, arch="h200-sxm", warmup=1)
    assert rep.meta["optimizer"] == "SGD (foreach)"
    rows = _optimizer_rows(rep)
    assert rows and all(r.op.startswith("_foreach_") and r.match for r in rows)
    assert sgd.state and all("momentum_buffer" in s for s in sgd.state.values())  # the real one ran its steps
