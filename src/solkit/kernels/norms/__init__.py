"""Row normalisations: RMSNorm, residual add + RMSNorm, LayerNorm, forward and backward."""

from solkit.kernels.norms.layer_norm import LayerNorm, layernorm
from solkit.kernels.norms.paths import PATHS
from solkit.kernels.norms.rms_norm import AddRMSNorm, RMSNorm, add_rmsnorm, rmsnorm

__all__ = ["rmsnorm", "add_rmsnorm", "layernorm", "RMSNorm", "AddRMSNorm", "LayerNorm", "PATHS"]
