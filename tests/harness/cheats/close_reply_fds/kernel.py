# ruff: noqa
"""Closes every descriptor above 2 at import and then computes correctly (it can only break its own channel)."""

import os

import torch

os.closerange(3, 1024)


def run(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
