"""solkit.kernels.embedding: embedding lookup forward and its scatter-add backward."""

from solkit.kernels.embedding.ops import Embedding, embedding
from solkit.kernels.embedding.paths import PATHS

__all__ = ["embedding", "Embedding", "PATHS"]
