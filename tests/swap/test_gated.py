"""solkit.swap.gated: the MLP's gate and down projection as one op keeping only gate and up for the backward (CPU,
Triton's interpreter, fp32/fp16)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.swap.gated import gated_linear

ACT = {"silu": F.silu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh")}
TOL = {torch.float32: 1e-4, torch.float16: 2e-2}


def _inputs(rows, inter, out, dtype, bias, residual, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).requires_grad_(True)

    gate, up = t(*rows, inter), t(*rows, inter)
    weight = t(out, inter, scale=inter**-0.5)
    return gate, up, weight, t(out) if bias else None, t(*rows, out) if residual else None


def _reference(gate, up, weight, bias, residual, activation):
    y = F.linear(ACT[activation](gate.float()) * up.float(), weight.float(), None if bias is None else bias.float())
    return y if residual is None else y + residual.float()


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize(
    ("rows", "inter", "out", "dtype", "bias", "residual"),
    [((2, 5), 24, 16, torch.float32, False, True), ((7,), 40, 24, torch.float16, True, False),
     ((3, 3), 17, 9, torch.float32, True, True)],
)  # fmt: skip
def test_values_and_every_gradient_match_torch(rows, inter, out, dtype, bias, residual, activation):
    args = _inputs(rows, inter, out, dtype, bias, residual)
    y = gated_linear(*args, activation)
    ref = _reference(*[a.detach().float().requires_grad_(True) if a is not None else None for a in args], activation)
    assert y.shape == ref.shape and y.dtype == dtype
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    wrt = [a for a in args if a is not None]
    got = torch.autograd.grad(y, wrt, dy)
    ref_in = [a.detach().float().requires_grad_(True) if a is not None else None for a in args]
    want = torch.autograd.grad(_reference(*ref_in, activation), [a for a in ref_in if a is not None], dy.float())
    tol = TOL[dtype]
    assert float((y.detach().float() - ref.detach()).norm() / ref.detach().norm()) < tol
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype and float((g.float() - w).norm() / w.norm()) < tol


def test_only_gate_up_and_the_weight_wait_for_the_backward():
    """The product act(gate) * up is not kept: the saved storages are gate, up and the weight (and the bias)."""
    gate, up, weight, bias, residual = _inputs((4, 6), 32, 8, torch.float32, True, True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = gated_linear(gate, up, weight, bias, residual)
    ptrs = {t.untyped_storage().data_ptr() for t in saved}
    assert ptrs == {t.untyped_storage().data_ptr() for t in (gate, up, weight, bias)}
    y.sum().backward()
    assert residual.grad is not None and torch.equal(residual.grad, torch.ones_like(residual))


def test_opcheck():
    args = [a.detach() for a in _inputs((3,), 16, 8, torch.float32, False, True)[:3]]
    gate, up, weight = (a.requires_grad_(True) for a in args)
    residual = torch.randn(3, 8, requires_grad=True)
    torch.library.opcheck(torch.ops.solkit.gated_linear.default, (gate, up, weight, None, residual, "silu"))


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_bf16_on_the_gpu_eager_and_compiled(activation):
    """bf16 at a Llama-like MLP slice: eager and Inductor-compiled (fullgraph) against torch in fp32."""
    args = [a.detach().cuda().requires_grad_(True) if a is not None else None
            for a in _inputs((2, 256), 1536, 512, torch.bfloat16, False, True)]  # fmt: skip
    dy = torch.randn(2, 256, 512, device="cuda", dtype=torch.bfloat16)
    ref_in = [a.detach().float().requires_grad_(True) if a is not None else None for a in args]
    ref = _reference(*ref_in, activation)
    want = torch.autograd.grad(ref, [a for a in ref_in if a is not None], dy.float())
    compiled = torch.compile(gated_linear, fullgraph=True)
    for fn in (gated_linear, compiled):
        y = fn(*args, activation)
        got = torch.autograd.grad(y, [a for a in args if a is not None], dy)
        assert float((y.detach().float() - ref.detach()).norm() / ref.detach().norm()) < 2e-2
        for g, w in zip(got, want, strict=True):
            assert float((g.float() - w).norm() / w.norm()) < 3e-2
