# ruff: noqa
"""Starts 20 sleeping children on every call and never waits for them."""

import subprocess

import torch


def run(x, weight):
    for _ in range(20):
        subprocess.Popen(["sleep", "4244.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
