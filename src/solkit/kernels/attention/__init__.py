"""solkit.kernels.attention: prefill (causal/non-causal GQA, varlen) and decode (split-KV, paged) attention."""

from solkit.kernels.attention.decode import DECODE_PATHS, decode_attention
from solkit.kernels.attention.ops import attention
from solkit.kernels.attention.paths import PATHS

PATHS = {**PATHS, **DECODE_PATHS}  # prefill's paths and decode's

__all__ = ["attention", "decode_attention", "PATHS"]
