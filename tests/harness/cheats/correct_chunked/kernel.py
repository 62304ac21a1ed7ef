"""A correct fp32 solution with a different reduction order (sums of column chunks): must PASS, not be flagged."""

import torch


def run(x, weight):
    n = x.shape[-1]
    acc = torch.zeros(x.shape[0], 1, dtype=torch.float32, device=x.device)
    for start in range(0, n, 96):
        chunk = x[:, start : start + 96]
        acc += (chunk * chunk).sum(dim=-1, keepdim=True)
    return x * torch.rsqrt(acc / n + 1e-6) * weight
