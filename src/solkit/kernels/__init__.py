"""solkit.kernels: the public face of solkit's Triton kernels.

Import kernels from here (``from solkit.kernels import rmsnorm``); each family lives in its own
subpackage (``gemm/``, ``softmax/``, ``cross_entropy/``, ``norms/``, ``rope/``, ``gates/``) and shares
helpers through ``common/``, which imports no family. :func:`all_paths` gives every kernel's paths and what each
needs of the device; :func:`kernel_paths` (``paths.describe``) the path each kernel takes on a device's
capabilities (``caps_for_product("rtx-4090")``). Every kernel is a PyTorch custom op in the namespace
``solkit::`` (``<family>/ops.py`` over ``common/ops.py``; docs/kernels/custom_ops.md), so ``torch.compile`` sees one
node per call and never traces into a launcher.
"""

from solkit.kernels.attention import attention, decode_attention
from solkit.kernels.common.capability import caps_for_product, portable_only, simulate
from solkit.kernels.cross_entropy import (
    CrossEntropyLoss,
    FusedLinearCrossEntropyLoss,
    cross_entropy,
    fused_linear_cross_entropy,
)
from solkit.kernels.embedding import Embedding, embedding
from solkit.kernels.gates import GeGLU, SwiGLU, geglu, glu_grads, swiglu
from solkit.kernels.gemm import FusedLinearResidual, fused_linear, gemm
from solkit.kernels.norms import AddRMSNorm, LayerNorm, RMSNorm, add_rmsnorm, layernorm, rmsnorm
from solkit.kernels.paths import all_paths
from solkit.kernels.paths import describe as kernel_paths
from solkit.kernels.rope import RoPE, apply_rope
from solkit.kernels.softmax import Softmax, softmax

__all__ = [
    "gemm",
    "fused_linear",
    "FusedLinearResidual",
    "rmsnorm",
    "add_rmsnorm",
    "layernorm",
    "RMSNorm",
    "AddRMSNorm",
    "LayerNorm",
    "softmax",
    "Softmax",
    "cross_entropy",
    "CrossEntropyLoss",
    "fused_linear_cross_entropy",
    "FusedLinearCrossEntropyLoss",
    "apply_rope",
    "RoPE",
    "swiglu",
    "geglu",
    "glu_grads",
    "SwiGLU",
    "GeGLU",
    "embedding",
    "decode_attention",
    "attention",
    "Embedding",
    "kernel_paths",
    "all_paths",
    "caps_for_product",
    "portable_only",
    "simulate",
]
