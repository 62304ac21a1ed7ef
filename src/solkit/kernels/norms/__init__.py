"""Row normalisations: RMSNorm, residual add + RMSNorm, LayerNorm, forward and backward (custom ops ``solkit::``)."""

from solkit.kernels.norms.ops import AddRMSNorm, LayerNorm, RMSNorm, add_rmsnorm, layernorm, rmsnorm
from solkit.kernels.norms.paths import PATHS

__all__ = ["rmsnorm", "add_rmsnorm", "layernorm", "RMSNorm", "AddRMSNorm", "LayerNorm", "PATHS"]
