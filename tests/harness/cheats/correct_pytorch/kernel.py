"""A correct solution (fused expression, different op order from the reference): must PASS."""

import torch


def run(x, weight):
    ms = torch.mean(x * x, dim=-1, keepdim=True)
    return weight * (x / torch.sqrt(ms + 1e-6))
