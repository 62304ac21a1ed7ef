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


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.Adam])
@pytest.mark.parametrize("width,hidden", [(24, 40), (7, 13)])
def test_multi_tensor_calls_get_the_same_work_in_every_profiled_step(monkeypatch, opt_cls, width, hidden):
    """AdamW's multi-tensor path calls _foreach_add and _foreach_sqrt/_foreach_div both over 0-dim tensors (the step
    counters; in the traced twin also the bias corrections) and over the parameters' state. The profiler records no
    shapes for tensor lists: each call must meet its own traced call, the same in every profiled step."""
    import importlib

    mod = importlib.import_module("solkit.model.analyze")
    steps = []

    def spy(events, work, on_gpu, **kw):
        rows, total = attribute(events, work, on_gpu, **kw)
        steps.append(
            [(r.op, r.shapes, r.bytes, tuple(sorted(r.flops.items()))) for r in rows if r.category == "optimizer"]
        )
        return rows, total

    attribute = mod.attribute
    monkeypatch.setattr(mod, "attribute", spy)
    model, x = _mlp(width, hidden)
    opt = opt_cls(model.parameters(), lr=1e-3, foreach=True)
    rep = analyze(model, x, mode="train_step", optimizer=opt, arch="h200-sxm", warmup=1, steps=3)
    assert len(steps) == 3 and steps[0] == steps[1] == steps[2]  # the same attribution in every step
    params = list(model.parameters())
    n, k = sum(p.numel() for p in params), len(params)
    rows = _optimizer_rows(rep)
    by = {}
    for r in rows:
        by.setdefault(r.op, []).append(r)
    # one pass over the parameters' state each, never the 0-dim bias corrections' work: exp_avg_sq read, its root out
    (sqrt,) = by["_foreach_sqrt"]
    assert sqrt.flops == {"fp32_vector": n} and sqrt.bytes == 4 * n * 2
    assert all(r.bytes >= 4 * n for r in by["_foreach_div"] + by["_foreach_addcdiv"] + by["_foreach_lerp"])
    # _foreach_add twice: the k step counters (0-dim, on the CPU here) and the eps added to the root, separate rows
    adds = sorted(by["_foreach_add"], key=lambda r: r.bytes)
    assert [r.bytes for r in adds] == [4 * k * 2, 4 * n * 2] and not adds[0].shapes and adds[1].shapes
    names = {g.name for g in rep.ops}
    assert f"_foreach_add [{k} x 0-dim]" in names
    s = rep.to_dict()["summary"]  # the counters' update: CPU time with ~no work, reported apart
    assert next(g for g in rep.ops if g.name == f"_foreach_add [{k} x 0-dim]").near_zero
    near = sum(g.timed_with_sol_s for g in rep.ops if g.near_zero)
    assert 0 < s["t_sol_near_zero_share"] == pytest.approx(near / rep.measured_s)
