"""Row softmax over the last dimension, forward and backward, rows up to 256k wide (custom ops
``solkit::softmax``, ``softmax_bwd``)."""

from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward
from solkit.kernels.softmax.ops import Softmax, softmax
from solkit.kernels.softmax.paths import PATHS

__all__ = ["softmax", "Softmax", "softmax_forward", "softmax_backward", "PATHS"]
