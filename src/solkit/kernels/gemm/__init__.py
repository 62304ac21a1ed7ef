"""GEMM with a fused epilogue: ``y = act(x @ W.T + bias) * alpha + residual * beta`` (custom op ``solkit::gemm``)."""

from solkit.kernels.gemm.aot import compile_for
from solkit.kernels.gemm.dispatch import LAST_LAUNCH, load_config_table, native, reference
from solkit.kernels.gemm.ops import FusedLinearResidual, fused_linear, gemm
from solkit.kernels.gemm.planning import PATHS, plan

__all__ = ["gemm", "fused_linear", "FusedLinearResidual", "compile_for", "load_config_table", "LAST_LAUNCH", "native",
           "reference", "PATHS", "plan"]  # fmt: skip
