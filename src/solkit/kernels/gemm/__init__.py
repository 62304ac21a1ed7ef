"""GEMM with a fused epilogue: ``y = act(x @ W.T + bias) * alpha + residual * beta``."""

from solkit.kernels.gemm.aot import compile_for
from solkit.kernels.gemm.dispatch import LAST_LAUNCH, gemm, load_config_table, native, reference
from solkit.kernels.gemm.linear_residual import FusedLinearResidual, fused_linear
from solkit.kernels.gemm.planning import PATHS, plan

__all__ = ["gemm", "fused_linear", "FusedLinearResidual", "compile_for", "load_config_table", "LAST_LAUNCH", "native",
           "reference", "PATHS", "plan"]  # fmt: skip
