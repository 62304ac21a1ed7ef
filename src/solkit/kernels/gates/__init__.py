"""Gated activations of the MLP: SwiGLU and GeGLU, forward and backward (custom ops ``solkit::glu``, ``glu_bwd``)."""

from solkit.kernels.gates.ops import GeGLU, SwiGLU, geglu, glu_grads, swiglu
from solkit.kernels.gates.paths import PATHS

__all__ = ["swiglu", "geglu", "glu_grads", "SwiGLU", "GeGLU", "PATHS"]
