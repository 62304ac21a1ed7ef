"""Cross-entropy over vocabulary-wide logits, and the fused linear cross-entropy that never materialises them
(custom ops ``solkit::cross_entropy``, ``fused_linear_cross_entropy``)."""

from solkit.kernels.cross_entropy.ops import (
    CrossEntropyLoss,
    FusedLinearCrossEntropyLoss,
    cross_entropy,
    fused_linear_cross_entropy,
)
from solkit.kernels.cross_entropy.paths import PATHS

__all__ = ["cross_entropy", "CrossEntropyLoss", "fused_linear_cross_entropy", "FusedLinearCrossEntropyLoss", "PATHS"]
