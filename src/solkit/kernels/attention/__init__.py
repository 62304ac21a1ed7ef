"""solkit.kernels.attention: prefill (causal/non-causal GQA, varlen) and decode (split-KV, paged) attention."""
