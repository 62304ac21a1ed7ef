"""solkit.kernels.gates.glu: SwiGLU and GeGLU (tanh) gates, values and gradients.

Reference: the same formula in float64 through torch. Budget: max error at most 2x the error of
eager torch in the input dtype, plus a small atol. CPU runs go through Triton's interpreter (fp32,
fp16, odd shapes); bf16, large shapes and the >2^31-element case are marked gpu.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.gates import GeGLU, SwiGLU, geglu, glu_grads, swiglu
from solkit.kernels.gates.glu import gated_backward, gated_bytes, gated_forward

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
EAGER = {
    "silu": lambda g, u: F.silu(g) * u,
    "gelu_tanh": lambda g, u: F.gelu(g, approximate="tanh") * u,
}
OPS = {"silu": swiglu, "gelu_tanh": geglu}


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "non-finite output (unwritten element?)"
    err = (out.double() - ref).abs().max().item()
    budget = 2 * (torch_out.double() - ref).abs().max().item() + atol * max(ref.abs().max().item(), 1.0)
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _check(gate, up, activation):
    dtype = gate.dtype
    gate, up = gate.detach().requires_grad_(), up.detach().requires_grad_()
    out = OPS[activation](gate, up)
    dy = torch.randn_like(out)
    dg, du = torch.autograd.grad(out, (gate, up), dy)
    g64, u64 = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    ref = EAGER[activation](g64, u64)
    rdg, rdu = torch.autograd.grad(ref, (g64, u64), dy.double())
    gt, ut = gate.detach().clone().requires_grad_(), up.detach().clone().requires_grad_()
    tout = EAGER[activation](gt, ut)
    tdg, tdu = torch.autograd.grad(tout, (gt, ut), dy)
    assert out.dtype == dtype and dg.dtype == dtype and du.dtype == dtype
    _assert_close(out, ref, tout, ATOL[dtype])
    _assert_close(dg, rdg, tdg, ATOL[dtype])
    _assert_close(du, rdu, tdu, ATOL[dtype])


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 37), (5, 131), (2, 3, 61), (2, 4099)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_values_and_grads(activation, shape, dtype, device):
    torch.manual_seed(hash((activation, shape)) % 1000)
    gate = (torch.randn(shape) * 3).to(device, dtype)
    up = torch.randn(shape).to(device, dtype)
    _check(gate, up, activation)


@pytest.mark.parametrize("module_cls,activation", [(SwiGLU, "silu"), (GeGLU, "gelu_tanh")])
def test_module_fused_input_is_strided_view(module_cls, activation, device):
    """A fused [.., 2N] projection output is split without a copy; grads land in the right halves."""
    x = torch.randn(4, 2 * 53, device=device, requires_grad=True)
    out = module_cls()(x)
    dy = torch.randn_like(out)
    (dx,) = torch.autograd.grad(out, x, dy)
    x64 = x.detach().double().requires_grad_()
    g, u = x64.chunk(2, -1)
    ref = EAGER[activation](g, u)
    (rdx,) = torch.autograd.grad(ref, x64, dy.double())
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dx.double(), rdx, atol=1e-5, rtol=1e-5)


def test_launchers_match_autograd(device):
    g, u = torch.randn(3, 29, device=device), torch.randn(3, 29, device=device)
    y = gated_forward(g, u, "silu")
    dy = torch.randn_like(y)
    dg, du, none = gated_backward(dy, g, u, "silu")
    assert none is None
    torch.testing.assert_close(du, dy * F.silu(g), atol=1e-5, rtol=1e-5)
    s = torch.sigmoid(g)
    torch.testing.assert_close(dg, dy * u * s * (1 + g * (1 - s)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize(("shape", "dtype"), [((3, 29), torch.float32), ((2, 5, 40), torch.float16)])
def test_the_backward_gives_the_forward_output_again(device, activation, shape, dtype):
    """``glu_grads(..., with_output=True)``: the gradients as without it, and the forward's output bit for bit (the
    same fp32 arithmetic and rounding), for callers that keep only gate and up."""
    g, u = torch.randn(shape, device=device, dtype=dtype), torch.randn(shape, device=device, dtype=dtype)
    dy = torch.randn(shape, device=device, dtype=dtype)
    dg, du, out = glu_grads(dy, g, u, activation, with_output=True)
    dg0, du0, none = glu_grads(dy, g, u, activation)
    assert none is None and out.shape == g.shape and out.dtype == dtype
    assert torch.equal(dg, dg0) and torch.equal(du, du0)
    assert torch.equal(out, gated_forward(g, u, activation))


def test_bad_inputs_raise(device):
    with pytest.raises(SolkitError, match="shapes differ"):
        swiglu(torch.randn(2, 3, device=device), torch.randn(2, 4, device=device))
    with pytest.raises(SolkitError, match="activation"):
        gated_forward(torch.randn(2, 3, device=device), torch.randn(2, 3, device=device), "relu")
    with pytest.raises(SolkitError, match="even last dim"):
        SwiGLU()(torch.randn(2, 5, device=device))
    with pytest.raises(SolkitError, match="dtype"):
        swiglu(torch.randn(2, 3, device=device), torch.randn(2, 3, device=device).half())


def test_byte_count():
    assert gated_bytes(8192, 14336, torch.bfloat16) == 3 * 2 * 8192 * 14336
    assert gated_bytes(8192, 14336, torch.bfloat16, backward=True) == 8 * 2 * 8192 * 14336


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_llama_rows(activation, dtype):
    torch.manual_seed(0)
    gate = torch.randn(257, 14336, device="cuda", dtype=dtype) * 3
    up = torch.randn(257, 14336, device="cuda", dtype=dtype)
    _check(gate, up, activation)


@pytest.mark.gpu
def test_gpu_more_than_2_31_elements():
    rows, cols = 150_000, 14336  # 2.15e9 elements: int64 offsets required
    gate = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    up = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    out = gated_forward(gate, up, "silu")
    tail = slice(rows - 3, rows)
    ref = F.silu(gate[tail].float()) * up[tail].float()
    torch.testing.assert_close(out[tail].float(), ref, atol=2e-2, rtol=2e-2)


def test_inputs_and_incoming_grad_are_not_modified(device):
    """The backward allocates dgate/dup (no writes into the saved gate/up or into dy)."""
    g, u = torch.randn(3, 40, device=device), torch.randn(3, 40, device=device)
    dy = torch.randn(3, 40, device=device)
    keep = [t.clone() for t in (g, u, dy)]
    gs, us = g.clone().requires_grad_(), u.clone().requires_grad_()
    y = swiglu(gs, us)
    y_keep = y.detach().clone()
    torch.autograd.grad(y, (gs, us), dy)
    for before, after in zip(keep, (gs.detach(), us.detach(), dy)):
        assert torch.equal(before, after)
    assert torch.equal(y.detach(), y_keep), "the forward output must survive the backward"
