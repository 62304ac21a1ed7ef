"""solkit.kernels.embedding: embedding lookup forward and its scatter-add backward."""
