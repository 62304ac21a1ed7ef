"""Fused gated activations for LLM MLPs: SwiGLU and GeGLU (tanh), forward and backward.

Math (``g`` = gate, ``u`` = up, element-wise, fp32 inside whatever the storage dtype):

* SwiGLU: ``y = silu(g) * u`` with ``silu(g) = g * s``, ``s = sigmoid(g)``.
  Backward: ``du = dy * silu(g)``; ``dg = dy * u * s * (1 + g * (1 - s))``.
* GeGLU (tanh approximation, as ``F.gelu(approximate="tanh")``):
  ``y = gelu(g) * u``, ``gelu(g) = 0.5 g (1 + t)``, ``t = tanh(c (g + 0.044715 g^3))``, ``c = sqrt(2/pi)``.
  Backward: ``du = dy * gelu(g)``;
  ``dg = dy * u * (0.5 (1 + t) + 0.5 g (1 - t^2) c (1 + 3 * 0.044715 g^2))``.

The backward recomputes the activation from ``g`` and ``u`` (nothing but the inputs is saved).

Bytes per call, ``M`` rows x ``N`` columns, ``b`` bytes per element (2 for bf16/fp16, 4 for fp32):

* forward:  read ``2·b·M·N`` (g, u), write ``b·M·N`` (y)            -> ``3·b·M·N``
* backward: read ``3·b·M·N`` (dy, g, u), write ``2·b·M·N`` (dg, du) -> ``5·b·M·N``
* forward + backward: ``8·b·M·N``. T_SOL = bytes / memory bandwidth (no other traffic is needed).

Layout: ``gate`` and ``up`` have the same shape ``[..., N]``; the last dimension must be contiguous but
rows may be strided (so ``gate, up = x.chunk(2, -1)`` views of one fused projection work without a
copy). Leading dimensions are flattened when they can be viewed as one row dimension.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import allowed, device_caps
from solkit.kernels.gates.paths import PATHS

_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_CUBIC = 0.044715
_ACTIVATIONS = ("silu", "gelu_tanh")


@triton.jit
def _tanh(x, FAST: tl.constexpr = False):
    if FAST:  # the hardware tanh (one MUFU op, max rel. error 2^-11): for bf16 storage on a GPU only
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    # tanh through the sigmoid: portable across Triton versions and the CPU interpreter.
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _gated_fwd_kernel(
    gate_ptr, up_ptr, out_ptr, n_cols, blocks_per_row,
    gate_row_stride, up_row_stride, out_row_stride,
    ACTIVATION: tl.constexpr, BLOCK: tl.constexpr, FAST_TANH: tl.constexpr = False,
):  # fmt: skip
    pid = tl.program_id(0)
    row = (pid // blocks_per_row).to(tl.int64)
    cols = (pid % blocks_per_row) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if ACTIVATION == "silu":
        act = g * tl.sigmoid(g)
    else:
        t = _tanh(0.7978845608028654 * (g + 0.044715 * g * g * g), FAST_TANH)
        act = 0.5 * g * (1.0 + t)
    tl.store(out_ptr + row * out_row_stride + cols, (act * u).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gated_bwd_kernel(
    dy_ptr, gate_ptr, up_ptr, dgate_ptr, dup_ptr, out_ptr, n_cols, blocks_per_row,
    dy_row_stride, gate_row_stride, up_row_stride, dgate_row_stride, dup_row_stride, out_row_stride,
    ACTIVATION: tl.constexpr, BLOCK: tl.constexpr, FAST_TANH: tl.constexpr = False, WRITE_OUT: tl.constexpr = False,
):  # fmt: skip
    pid = tl.program_id(0)
    row = (pid // blocks_per_row).to(tl.int64)
    cols = (pid % blocks_per_row) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(gate_ptr + row * gate_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * up_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if ACTIVATION == "silu":
        s = tl.sigmoid(g)
        act = g * s
        dact = s * (1.0 + g * (1.0 - s))
    else:
        t = _tanh(0.7978845608028654 * (g + 0.044715 * g * g * g), FAST_TANH)
        act = 0.5 * g * (1.0 + t)
        dact = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * g * g)
    tl.store(dgate_ptr + row * dgate_row_stride + cols, (dy * u * dact).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + row * dup_row_stride + cols, (dy * act).to(dup_ptr.dtype.element_ty), mask=mask)
    if WRITE_OUT:  # the forward's output again, rounded as the forward rounds it (act * u in fp32)
        tl.store(out_ptr + row * out_row_stride + cols, (act * u).to(out_ptr.dtype.element_ty), mask=mask)


def _as_rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """View ``x`` as [rows, N] with a unit last stride; copies only when no such view exists."""
    if x.dim() == 0:
        raise SolkitError(f"swiglu: {name} must have at least 1 dimension, got a scalar")
    if x.stride(-1) != 1:
        x = x.contiguous()
    n = x.shape[-1]
    if x.dim() == 1:
        return x.view(1, n)
    try:
        return x.view(-1, n)
    except RuntimeError:
        return x.reshape(-1, n)  # non-viewable leading dims: reshape copies


def _check(gate: torch.Tensor, up: torch.Tensor, activation: str) -> None:
    if activation not in _ACTIVATIONS:
        raise SolkitError(f"swiglu: activation must be one of {_ACTIVATIONS}, got {activation!r}")
    if gate.shape != up.shape:
        raise SolkitError(f"swiglu: gate and up shapes differ: {tuple(gate.shape)} vs {tuple(up.shape)}")
    if gate.dtype != up.dtype or gate.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise SolkitError(f"swiglu: gate/up dtype must match and be fp16, bf16 or fp32, got {gate.dtype}/{up.dtype}")


#: Launch settings (gates/configs.yaml ``glu``): columns per program (capped by the row width) and warps per program.
GATE_CONFIG = tuned.load("gates", "glu")


def _launch_config(n_cols: int) -> tuple[int, int]:
    block = min(GATE_CONFIG["block"], triton.next_power_of_2(max(n_cols, 16)))
    return block, (GATE_CONFIG["num_warps"] if block >= 1024 else 4)


def _fast_tanh(x: torch.Tensor, activation: str, direction: str) -> bool:
    """The hardware tanh (relative error 2^-11) is exact enough for bf16 storage (a rounding is 2^-9; for
    fp16, 2^-11, it would double the error), and exists only on the GPU (not in the CPU interpreter); GeGLU takes
    it where the device runs that path (:data:`~solkit.kernels.gates.paths.PATHS`). SiLU never reads the flag: it
    is passed as it always was, so its compiled kernel does not change."""
    kernel = f"{'swiglu' if activation == 'silu' else 'geglu'}_{direction}"
    runs = allowed(PATHS[kernel], device_caps(x), kernel)
    return x.is_cuda and x.dtype == torch.bfloat16 and (activation == "silu" or "fast_tanh" in runs)


def gated_forward(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """``act(gate) * up`` in one pass; output has gate's shape and dtype."""
    _check(gate, up, activation)
    g2, u2 = _as_rows(gate, "gate"), _as_rows(up, "up")
    out = torch.empty(g2.shape, dtype=gate.dtype, device=gate.device)
    rows, n = g2.shape
    if rows and n:
        block, warps = _launch_config(n)
        nblk = triton.cdiv(n, block)
        _gated_fwd_kernel[(rows * nblk,)](
            g2, u2, out, n, nblk, g2.stride(0), u2.stride(0), out.stride(0),
            ACTIVATION=activation, BLOCK=block, FAST_TANH=_fast_tanh(gate, activation, "fwd"), num_warps=warps,
        )  # fmt: skip
    return out.view(gate.shape)


def gated_backward(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", with_output: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Gradients ``(d gate, d up)`` of ``act(gate) * up``, recomputing the activation; with ``with_output`` also the
    forward's output ``act(gate) * up`` (same rounding), so a caller that did not keep it gets it for one more
    write instead of a second pass over gate and up. The third entry is None without ``with_output``."""
    _check(gate, up, activation)
    g2, u2 = _as_rows(gate, "gate"), _as_rows(up, "up")
    dy = _as_rows(grad_out.to(gate.dtype), "grad_out")
    dgate = torch.empty(g2.shape, dtype=gate.dtype, device=gate.device)
    dup = torch.empty(g2.shape, dtype=gate.dtype, device=gate.device)
    out = torch.empty(g2.shape, dtype=gate.dtype, device=gate.device) if with_output else None
    rows, n = g2.shape
    if rows and n:
        block, warps = _launch_config(n)
        nblk = triton.cdiv(n, block)
        o = out if out is not None else dgate  # never written without WRITE_OUT
        _gated_bwd_kernel[(rows * nblk,)](
            dy, g2, u2, dgate, dup, o, n, nblk,
            dy.stride(0), g2.stride(0), u2.stride(0), dgate.stride(0), dup.stride(0), o.stride(0),
            ACTIVATION=activation, BLOCK=block, FAST_TANH=_fast_tanh(gate, activation, "bwd"), WRITE_OUT=with_output,
            num_warps=warps,
        )  # fmt: skip
    return dgate.view(gate.shape), dup.view(up.shape), None if out is None else out.view(gate.shape)


def gated_bytes(rows: int, cols: int, dtype: torch.dtype, backward: bool = False) -> int:
    """Minimum bytes moved by one forward (or forward + backward when ``backward``) call."""
    elem = torch.empty((), dtype=dtype).element_size()
    return (8 if backward else 3) * elem * rows * cols
