"""Rotary position embedding of q and k, forward and backward (custom ops ``solkit::rope``, ``rope_bwd``)."""

from solkit.kernels.rope.ops import RoPE, apply_rope
from solkit.kernels.rope.paths import PATHS

__all__ = ["apply_rope", "RoPE", "PATHS"]
