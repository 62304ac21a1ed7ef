"""Variants: swaps are probed, counted and reported; a missing or wrong kernel is never used silently."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.train import variants as V
from solkit.train.config import get_config
from solkit.train.model import build_model, synthetic_batches
from solkit.train.worker import run as run_worker_inprocess

SMALL = dict(seq=16, batch=1)


def _model(**over):
    return build_model(get_config("tiny", **{**SMALL, **over}), "cpu", torch.float32, seed=0)


def _loss(model):
    x, y = synthetic_batches(model.cfg, 1, 16, 1, 0, "cpu")[0]
    return model(x, y)


def _torch_adapters():
    """Correct kernels written in plain torch, standing in for the fused ones."""

    def rms(m, x):
        xf = x.float()
        return m.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m.eps)).to(x.dtype)

    def rope(m, q, k, cos, sin):
        def rot(t):
            t1, t2 = t.chunk(2, -1)
            return t * cos[:, None] + torch.cat((-t2, t1), -1) * sin[:, None]

        return rot(q), rot(k)

    return {
        "rmsnorm": lambda: rms,
        "rope": lambda: rope,
        "swiglu": lambda: lambda m, g, u: F.silu(g) * u,
        "linear_residual": lambda: (
            lambda m, x, residual=None: torch.addmm(
                residual.reshape(-1, m.weight.shape[0]), x.reshape(-1, x.shape[-1]), m.weight.T
            ).view(*x.shape[:-1], -1)
        ),
        "fused_linear_ce": lambda: (
            lambda m, h, y: F.cross_entropy(h.reshape(-1, h.shape[-1]) @ m.weight.T, y.reshape(-1))
        ),
    }


def test_every_swap_counted_and_called(monkeypatch):
    monkeypatch.setitem(V.ADAPTERS, "solkit", _torch_adapters())
    ref = _loss(_model()).item()
    model = _model()
    prepared = V.apply_variant(model, "solkit")
    assert prepared.complete and prepared.unavailable == []
    cfg = model.cfg
    want = {"rmsnorm": 2 * cfg.layers + 1, "rope": cfg.layers, "swiglu": cfg.layers,
            "linear_residual": 2 * cfg.layers, "fused_linear_ce": 1}  # fmt: skip
    assert {s.kind: s.replaced for s in prepared.swaps} == want
    loss = _loss(model)
    loss.backward()
    assert V.swap_call_counts(model) == want  # each replaced module ran exactly once
    assert loss.item() == pytest.approx(ref, rel=1e-5)
    # the wrapped modules keep the original parameters: same count, same tensors
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in _model().parameters())


def test_missing_kernel_is_reported_not_pretended(monkeypatch):
    adapters = _torch_adapters()

    def missing():
        raise ModuleNotFoundError("No module named 'solkit.kernels.nothing'")

    adapters["swiglu"] = missing
    monkeypatch.setitem(V.ADAPTERS, "solkit", adapters)
    model = _model()
    prepared = V.apply_variant(model, "solkit")
    assert not prepared.complete
    assert prepared.unavailable == ["swiglu"]
    report = prepared.to_dict()
    swiglu = next(s for s in report["swaps"] if s["kind"] == "swiglu")
    assert swiglu["replaced"] == 0 and "nothing" in swiglu["reason"]
    assert report["unavailable_swaps"] == ["swiglu"]
    _loss(model).backward()
    assert "swiglu" not in V.swap_call_counts(model)


def test_wrong_kernel_fails_its_probe(monkeypatch):
    adapters = _torch_adapters()
    adapters["rmsnorm"] = lambda: lambda m, x: 1.01 * x  # not an RMSNorm
    monkeypatch.setitem(V.ADAPTERS, "solkit", adapters)
    prepared = V.apply_variant(_model(), "solkit")
    rms = next(s for s in prepared.swaps if s.kind == "rmsnorm")
    assert rms.status == "unavailable" and "probe mismatch" in rms.reason
    assert prepared.unavailable == ["rmsnorm"]


def test_variant_registry():
    assert set(V.VARIANTS) >= {"eager", "compile", "solkit", "compile+solkit", "liger", "flce"}
    assert V.get_variant("compile+solkit").compile and V.get_variant("compile+solkit").backend == "solkit"
    with pytest.raises(SolkitError, match="allowed"):
        V.get_variant("fast")
    eager = V.apply_variant(_model(), "eager")
    assert eager.complete and eager.swaps == [] and eager.compiled == []


def test_liger_absent_is_reported():
    if importlib.util.find_spec("liger_kernel") is not None:
        pytest.skip("liger_kernel is installed here")
    prepared = V.apply_variant(_model(), "liger")
    assert prepared.unavailable == ["rmsnorm", "rope", "swiglu", "fused_linear_ce"]
    assert all("liger_kernel" in s.reason for s in prepared.swaps)


@pytest.mark.slow
def test_compile_variant_trains_like_eager():
    """torch.compile (aot_eager backend: Dynamo + AOTAutograd, no codegen, to stay fast on CPU)."""
    spec = dict(config="tiny", device="cpu", dtype="fp32", warmup=1, steps=1, lr=1e-3, **SMALL)
    eager = run_worker_inprocess({**spec, "variant": "eager"})
    comp = run_worker_inprocess({**spec, "variant": "compile", "compile_backend": "aot_eager"})
    assert comp["variant"]["compiled_modules"][-2:] == ["norm", "head"]
    assert comp["losses"] == pytest.approx(eager["losses"], abs=1e-4)
    assert comp["param_grad_norms_step0"] == pytest.approx(eager["param_grad_norms_step0"], rel=1e-4)
    assert eager["losses"][1] != eager["losses"][0]  # the optimizer step changed the model


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["solkit", "compile+solkit"])
def test_solkit_kernels_swap_in_and_train_like_eager(variant):
    """The real solkit kernels (Triton interpreter, fp32): every available swap probed, same losses as eager.
    Under the interpreter, compile+solkit keeps the kernels behind graph breaks (Dynamo cannot trace it)."""
    spec = dict(config="tiny", device="cpu", dtype="fp32", warmup=1, steps=1, lr=1e-3, **SMALL)
    eager = run_worker_inprocess({**spec, "variant": "eager"})
    fused = run_worker_inprocess({**spec, "variant": variant, "compile_backend": "aot_eager"})
    assert fused["status"] == "ok"
    swaps = {s["kind"]: s for s in fused["variant"]["swaps"]}
    for kind, s in swaps.items():  # every swap's kernel is on solkit.kernels' public face
        assert s["status"] == "ok", s["reason"]
        assert s["replaced"] == s["expected"]
        if variant == "solkit":  # compiled code does not count calls
            assert fused["swap_calls_first_step"][kind] == s["replaced"]
    assert fused["losses"] == pytest.approx(eager["losses"], abs=1e-3)
    # every parameter's first gradient agrees (names canonicalised through the swap wrappers)
    ref, got = eager["param_grad_norms_step0"], fused["param_grad_norms_step0"]
    assert set(ref) == set(got) and len(ref) == sum(1 for _ in _model().parameters())
    for name, want in ref.items():
        assert got[name] == pytest.approx(want, rel=1e-3, abs=1e-6), name


@pytest.mark.slow
def test_compile_falls_back_when_a_kernel_cannot_be_compiled(monkeypatch):
    """A kernel the compiler backend rejects (as Inductor rejected traced Triton kernels on the H200):
    the first step retries with kernels behind graph breaks, and every attempt is recorded."""
    from torch._dynamo import register_backend

    @register_backend
    def solkit_test_picky(gm, example_inputs):  # fails on graphs that contain the marker op
        if any("erfinv" in str(n.target) for n in gm.graph.nodes):
            raise RuntimeError("backend cannot compile this kernel")
        return gm.forward

    adapters = _torch_adapters()
    plain_rms = adapters["rmsnorm"]()
    adapters["rmsnorm"] = lambda: lambda m, x: plain_rms(m, x) + torch.special.erfinv(torch.zeros_like(x))
    monkeypatch.setitem(V.ADAPTERS, "solkit", adapters)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # these kernels are plain torch: let Dynamo trace them
    spec = dict(config="tiny", device="cpu", dtype="fp32", warmup=1, steps=1, lr=1e-3, **SMALL)
    eager = run_worker_inprocess({**spec, "variant": "eager"})
    comp = run_worker_inprocess({**spec, "variant": "compile+solkit", "compile_backend": "solkit_test_picky"})
    assert comp["status"] == "ok"
    v = comp["variant"]
    assert [a["ok"] for a in v["compile_attempts"]] == [False, False, True]
    assert v["compile_attempts"][0]["opaque"] == [] and "cannot compile" in v["compile_attempts"][0]["error"]
    assert v["compile_attempts"][1]["opaque"] == ["fused_linear_ce", "linear_residual"]
    assert v["opaque_kinds"] == sorted(V.SWAP_KINDS) and v["kernels_opaque_to_compile"]
    assert comp["losses"] == pytest.approx(eager["losses"], abs=1e-4)
