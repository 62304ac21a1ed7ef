# ruff: noqa
"""DPS: computes correctly, then truncates every buffer file in its scratch directory (the judge's mappings)."""

import glob
import os

import torch


def run(x, weight, y):
    torch.mul(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6), weight, out=y)
    for path in glob.glob("buffers/**/*", recursive=True):
        try:
            os.truncate(path, 0)
        except OSError:
            pass
