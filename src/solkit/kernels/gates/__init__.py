"""Gated activations of the MLP: SwiGLU and GeGLU, forward and backward."""

from solkit.kernels.gates.glu import GeGLU, SwiGLU, geglu, swiglu
from solkit.kernels.gates.paths import PATHS

__all__ = ["swiglu", "geglu", "SwiGLU", "GeGLU", "PATHS"]
