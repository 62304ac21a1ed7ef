"""GEMM with a fused epilogue: ``y = act(x @ W.T + bias) * alpha + residual * beta``."""

from solkit.kernels.gemm.dispatch import gemm
from solkit.kernels.gemm.linear_residual import FusedLinearResidual, fused_linear

__all__ = ["gemm", "fused_linear", "FusedLinearResidual"]
