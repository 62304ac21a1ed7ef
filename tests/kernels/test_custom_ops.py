"""solkit.kernels.common.ops: every public kernel is a ``solkit::`` custom op.

* ``torch.library.opcheck`` on each op, forward and backward (schema, fake tensors, autograd registration,
  AOTAutograd with dynamic shapes), on tiny odd shapes: fp32/fp16 through Triton's interpreter here, bf16 too
  on the GPU;
* the eager fast path (no dispatcher) and the registered op (under a dispatch mode) give bit-identical values
  and gradients, and a dispatch mode sees the ``solkit::`` ops;
* a Llama decoder layer of solkit's model with the solkit kernels swapped in compiles with
  ``fullgraph=True`` and no graph break, forward and backward, and matches eager.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import solkit.kernels as K
from solkit.kernels.common import ops

FP = [torch.float32, torch.float16]


def _t(*shape, dtype=torch.float32, device="cpu", grad=True, seed=0, scale=1.0, shift=0.0):
    gen = torch.Generator().manual_seed(seed + sum(shape))
    t = (torch.randn(*shape, generator=gen) * scale + shift).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


# Each case: public function, the ops it must reach, and its inputs (dtype, device) -> (args, kwargs).
CASES = {
    "rmsnorm": (K.rmsnorm, ("rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(3, 37, dtype=dt, device=dev),
                _t(37, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
    "rmsnorm_gemma": (K.rmsnorm, ("rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(2, 3, 33, dtype=dt, device=dev),
                      _t(33, dtype=dt, device=dev, seed=1), 1e-6, 1.0, "gemma"), {})),
    "add_rmsnorm": (K.add_rmsnorm, ("add_rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(5, 41, dtype=dt, device=dev),
                    _t(5, 41, dtype=dt, device=dev, seed=2), _t(41, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
    "layernorm": (K.layernorm, ("layernorm", "layernorm_bwd"), lambda dt, dev: ((_t(2, 19, dtype=dt, device=dev),
                  _t(19, dtype=dt, device=dev, seed=1, shift=1.0), _t(19, dtype=dt, device=dev, seed=2)), {})),
    "layernorm_nobias": (K.layernorm, ("layernorm", "layernorm_bwd"), lambda dt, dev: ((_t(1, 23, dtype=dt,
                         device=dev), _t(23, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
}  # fmt: skip


class _Capture(TorchDispatchMode):
    """Passes every op through, recording the ``solkit::`` calls (so :func:`ops.traced` is true under it)."""

    def __init__(self):
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "solkit":
            self.calls.append((func, args))
        return out


def _run(fn, args, kwargs):
    out = fn(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    diff = [o for o in outs if o.requires_grad]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad(diff, leaves, [torch.ones_like(o) for o in diff])
    return [o.detach() for o in outs] + list(grads)


def _check_op(name, dtype, device):
    """The public function on the eager fast path and through the dispatcher (under a dispatch mode): the same
    values and gradients bit for bit, the forward and backward ops seen; then opcheck on every op call seen."""
    fn, names, make = CASES[name]
    args, kwargs = make(dtype, device)
    fast = _run(fn, args, kwargs)
    capture = _Capture()
    with capture:
        traced = _run(fn, args, kwargs)
    assert {f._opname for f, _ in capture.calls} == set(names)
    for a, b in zip(fast, traced, strict=True):
        assert torch.equal(a, b)
    for func, call_args in capture.calls:
        differentiable = ops.KERNEL_OPS[func._opname].backward is not None
        leaves = tuple(
            a.detach().requires_grad_(a.requires_grad and differentiable) if isinstance(a, torch.Tensor) else a
            for a in call_args
        )
        # A backward op is checked under AOTAutograd inside its forward op's check (the joint graph).
        utils = None if differentiable else ("test_schema", "test_faketensor")
        torch.library.opcheck(func, leaves, **({} if utils is None else {"test_utils": utils}))


#: Cases whose interpreted launches take about a second each (the opcheck of one runs them ~10 times): one
#: dtype each on the CPU, every dtype on the GPU.
CPU_ONE_DTYPE = {"layernorm": torch.float32, "layernorm_nobias": torch.float16}


@pytest.mark.parametrize("dtype", FP, ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name, dtype):
    if CPU_ONE_DTYPE.get(name, dtype) != dtype:
        pytest.skip(f"{name}: {CPU_ONE_DTYPE[name]} only in the interpreter (slow launches); all dtypes on the GPU")
    _check_op(name, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*FP, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_gpu(name, dtype):
    _check_op(name, dtype, "cuda")


def test_no_grad_call_saves_nothing():
    """Without a gradient to come, the forward op is asked for no rstd (an empty extra output)."""
    x, w = _t(4, 32, grad=False), _t(32, grad=False)
    y, rstd = torch.ops.solkit.rmsnorm(x, w, 1e-6, 0.0, "llama", ops.grad_wanted(x, w))
    assert rstd.numel() == 0 and y.shape == x.shape


def test_options_json_round_trip():
    cfg = {"split_block": 0, "num_warps": 4}
    assert ops.options(ops.options_json(cfg)) == cfg and ops.options(None) is None
