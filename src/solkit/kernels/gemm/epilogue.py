"""The fused GEMM epilogue shared by solkit's GEMM kernels (gemm/kernels.py, decode.py).

``act(acc + bias) * alpha + residual * beta`` on an fp32 accumulator tile; every term is switched
on or off at compile time, so the plain GEMM pays nothing for it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def apply_epilogue(acc, offs_n, N, bias_ptr, res, alpha, beta, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                   ACT: tl.constexpr):  # fmt: skip
    """fp32 tile -> act(acc + bias) * alpha + res * beta (res already loaded, any float dtype)."""
    if HAS_BIAS:
        b = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + b[None, :]
    if ACT == 1:
        acc = acc * tl.sigmoid(acc)
    elif ACT == 2:
        # gelu_tanh(z) = z * sigmoid(2c (z + 0.044715 z^3)), c = sqrt(2/pi): 0.5 (1 + tanh u) = sigmoid(2u)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    acc = acc * alpha
    if HAS_RESIDUAL:
        acc = acc + res.to(tl.float32) * beta
    return acc
