"""solkit.swap: solkit's kernels swapped into a user's Hugging Face model, per instance (solkit.patch)."""
