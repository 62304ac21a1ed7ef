"""Rotary position embedding of q and k, forward and backward."""

from solkit.kernels.rope.paths import PATHS
from solkit.kernels.rope.rotary import RoPE, apply_rope

__all__ = ["apply_rope", "RoPE", "PATHS"]
