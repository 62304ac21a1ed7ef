"""Writes the result into the input x in place and returns x (no output allocation)."""

import torch


def run(x, weight):
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return x.mul_(inv).mul_(weight)
