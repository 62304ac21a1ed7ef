"""Honest work with one element out of tolerance on every call after the correctness trials: an honest kernel's rare
rounding outlier on one of the judge's extra (timed and fresh) sets. It must PASS, the outliers counted."""

import torch

_calls = {}


def run(x, weight):
    key = tuple(x.shape)
    _calls[key] = _calls.get(key, 0) + 1
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
    if _calls[key] > 3:
        y = y.clone()
        y.view(-1)[0] += 1.0
    return y
