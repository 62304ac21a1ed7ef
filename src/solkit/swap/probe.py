"""The numeric probe every swap passes before ``solkit.patch`` applies it.

A probe runs the module's current forward (the reference) and the swapped forward (the candidate) on
the same small random inputs, in the model's dtype and on its device, then backpropagates the same
random projection of each output. It compares the outputs and the gradients of every floating input
and every parameter of the module, each as ``|got - want| / |want|`` (Frobenius norms, so a tensor's
tiny elements do not dominate), and fails on the worst one above the dtype's tolerance, on a NaN, or
on a shape or dtype mismatch. Gradients come from ``torch.autograd.grad``: nothing accumulates into
the parameters' ``.grad``, and the model's weights are only read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

# Relative error (norm-wise) allowed between a swapped forward and the module's own, per dtype: the
# kernels accumulate in fp32 where eager rounds intermediate results to the parameter dtype, so bf16
# differs from eager by a few of its 2^-8 epsilons; fp32 only by summation order.
TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 4e-2}


class ProbeMismatch(ValueError):
    """The candidate computes something else than the module (relative error above the tolerance)."""


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    raise TypeError(f"probe: cannot find a tensor in the output ({type(out).__name__})")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _run(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], params: Sequence[nn.Parameter], seed: int
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    inputs = [a.detach().clone().requires_grad_(True) if _is_float(a) else a for a in args]
    kw = {k: v.detach().clone().requires_grad_(True) if _is_float(v) else v for k, v in kwargs.items()}
    out = _first_tensor(fn(*inputs, **kw))
    gen = torch.Generator(device=out.device).manual_seed(seed)
    proj = torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32)
    wrt = [t for t in [*inputs, *kw.values()] if _is_float(t)] + list(params)
    grads = torch.autograd.grad((out.float() * proj).sum(), wrt, allow_unused=True)
    return out.detach(), list(grads)


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def compare(
    reference: Callable[..., Any],
    candidate: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    params: Sequence[nn.Parameter] = (),
    dtype: torch.dtype = torch.float32,
    seed: int = 1234,
) -> float:
    """Worst relative error of the candidate's output and gradients; raises :class:`ProbeMismatch` above tolerance."""
    kwargs = kwargs or {}
    params = [p for p in params if p.requires_grad]
    want, want_g = _run(reference, args, kwargs, params, seed)
    got, got_g = _run(candidate, args, kwargs, params, seed)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise ProbeMismatch(
            f"output {tuple(got.shape)} {got.dtype} where the module gives {tuple(want.shape)} {want.dtype}"
        )
    worst, where = rel_err(got, want), "output"
    for i, (g, w) in enumerate(zip(got_g, want_g, strict=True)):
        if w is None and g is None:
            continue
        if w is None or g is None:
            raise ProbeMismatch(f"gradient {i} exists on one side only")
        err = rel_err(g, w)
        if not err <= worst:  # NaN counts as worst
            worst, where = err, f"gradient {i}"
    tol = TOLERANCE.get(dtype, TOLERANCE[torch.bfloat16])
    if not worst <= tol:
        name = str(dtype).removeprefix("torch.")
        raise ProbeMismatch(f"relative error {worst:.3g} in the {where} > {tol:g} ({name})")
    return worst


def random_like_activation(shape: Sequence[int], ref: torch.Tensor, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal activations on ``ref``'s device, in its dtype (drawn in fp32 so every dtype sees the same)."""
    gen = torch.Generator(device=ref.device).manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device=ref.device, dtype=torch.float32) * scale).to(ref.dtype)
