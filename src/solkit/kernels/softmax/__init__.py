"""Row softmax over the last dimension, forward and backward, rows up to 256k wide."""

from solkit.kernels.softmax.dispatch import Softmax, softmax, softmax_backward, softmax_forward
from solkit.kernels.softmax.paths import PATHS

__all__ = ["softmax", "Softmax", "softmax_forward", "softmax_backward", "PATHS"]
