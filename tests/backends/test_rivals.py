"""The rival backends and the backward-alone adapter, on the CPU (SDPA has CPU kernels; cuDNN, FlashInfer and quack
are absent here, so their rows must say why)."""

import pytest
import torch
import torch.nn.functional as F

from solkit.backends import BACKENDS
from solkit.backends.backward_only import BACKWARD_ROWS, backward_only
from solkit.backends.rivals import probe
from solkit.backends.sdpa import FORCED, forced
from solkit.errors import SolkitError


@pytest.mark.parametrize("name", ["cudnn", "flashinfer", "quack"])
def test_missing_rival_is_unavailable_with_reason(name, monkeypatch):
    b = BACKENDS[name]
    ok, why = b.available("cuda")
    if ok:
        pytest.skip(f"{name} is installed here")
    assert name in why and "not importable" in why
    if name != "cudnn":
        assert "pip install" in why and "MB" in why


def test_probe_names_the_install():
    assert probe("flashinfer") is None or "flashinfer-python" in probe("flashinfer")


@pytest.mark.parametrize("shape", [(1, 4, 9, 16, 2), (2, 6, 17, 32, 3)])  # B, Hq, S, D, group
def test_forced_sdpa_matches_math_or_names_refusal(shape):
    b, hq, s, d, group = shape
    torch.manual_seed(0)
    q = torch.randn(b, hq, s, d)
    k, v = torch.randn(b, hq // group, s, d), torch.randn(b, hq // group, s, d)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                         is_causal=True)  # fmt: skip
    for name in FORCED:
        try:
            out = forced(name)(q, k, v)
        except SolkitError as exc:  # a backend this device lacks: the reason names it
            assert name in str(exc) and "refused" in str(exc)
            continue
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_backward_only_times_the_backward_on_the_saved_forward():
    calls = []

    def rms(x, w):
        calls.append(1)
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    run = backward_only(rms, 2)
    x, w, dy = torch.randn(5, 7, dtype=torch.float64), torch.randn(7, dtype=torch.float64), torch.randn(5, 7).double()
    dx, dw = run(x, w, dy)
    dx2, dw2 = run(x, w, dy)  # same input set: no second forward
    assert len(calls) == 1 and torch.equal(dx, dx2) and torch.equal(dw, dw2)
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    ex, ew = torch.autograd.grad(rms(xs, ws), (xs, ws), dy)
    torch.testing.assert_close((dx, dw), (ex, ew))
    x.mul_(2)  # written in place: its version moved, so the forward runs again on the new values
    dx3, _ = run(x, w, dy)
    assert len(calls) == 3 and not torch.allclose(dx3, dx)


def test_backward_rows_are_backward_alone_in_every_backend():
    for name in BACKWARD_ROWS:
        for b in ("eager", "compile", "vendor", "liger", "solkit"):
            factory = BACKENDS[b].impls.get(name)
            if factory is None:
                continue
            assert "backward_only" in factory.__code__.co_names or "_compile_backward" in str(factory), (b, name)


def _attn_inputs(b=1, hq=8, hkv=2, s=300, d=128):
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    return mk(b, hq, s, d), mk(b, hkv, s, d), mk(b, hkv, s, d), mk(b, hq, s, d)


def _fp32_reference(q, k, v, do):
    rep = q.shape[1] // k.shape[1]
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    qq, kk, vv = leaves[0], leaves[1].repeat_interleave(rep, 1), leaves[2].repeat_interleave(rep, 1)
    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
    return (out, *torch.autograd.grad(out, leaves, do.float()))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "cudnn", "flashinfer"])
def test_attention_rivals_on_gpu_match_fp32_or_say_why(name):
    from solkit.backends.autograd import bwd_attn

    b = BACKENDS[name]
    ok, why = b.available("cuda")
    if not ok:
        pytest.skip(why)
    q, k, v, do = _attn_inputs()
    want = _fp32_reference(q, k, v, do)
    try:
        out = b.make("attention_causal", None)(q, k, v)
        got = bwd_attn(b.make("attention_causal", None))(q, k, v, do) if "attention_causal_bwd" in b.impls else (out,)
    except SolkitError as exc:  # a backend that refuses the shape names itself and the reason
        assert name in str(exc) or "cudnn" in str(exc)
        return
    for g, w in zip(got, want):
        scale = w.abs().max().item()
        torch.testing.assert_close(g.float(), w, atol=2e-2 * scale, rtol=2e-2)
