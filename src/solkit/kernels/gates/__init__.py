"""Gated activations of the MLP: SwiGLU and GeGLU, forward and backward."""

from solkit.kernels.gates.glu import GeGLU, SwiGLU, geglu, swiglu

__all__ = ["swiglu", "geglu", "SwiGLU", "GeGLU"]
