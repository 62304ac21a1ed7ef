"""Cross-entropy over vocabulary-wide logits, and the fused linear cross-entropy that never materialises them."""

from solkit.kernels.cross_entropy.dispatch import CrossEntropyLoss, cross_entropy
from solkit.kernels.cross_entropy.fused_linear import FusedLinearCrossEntropyLoss, fused_linear_cross_entropy
from solkit.kernels.cross_entropy.paths import PATHS

__all__ = ["cross_entropy", "CrossEntropyLoss", "fused_linear_cross_entropy", "FusedLinearCrossEntropyLoss", "PATHS"]
