"""Returns a tensor subclass that would compute on first use (a lazy output)."""

import torch


class LazyResult(torch.Tensor):
    pass


def run(x, weight):
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
    return y.as_subclass(LazyResult)
