"""solkit.swap: solkit's kernels swapped into a user's Hugging Face model, per instance (solkit.patch).

``patch(model, options=None)`` binds kernel-calling forwards to the RMSNorms, attentions (RoPE, SDPA's
backends in the measured order, o_proj + residual), MLPs (SwiGLU/GeGLU, down_proj + residual) and the
causal-LM loss (fused linear cross-entropy) of one Llama, Mistral, Qwen2/Qwen3 or Gemma 2/3 model, each swap
probed numerically first, and returns a :class:`PatchReport`; ``unpatch(model)`` restores it. transformers is imported
only when a model is patched.
"""

from solkit.swap.families import SUPPORTED
from solkit.swap.patching import KINDS, PatchReport, SwapResult, is_patched, patch, unpatch

__all__ = ["patch", "unpatch", "is_patched", "PatchReport", "SwapResult", "KINDS", "SUPPORTED"]
