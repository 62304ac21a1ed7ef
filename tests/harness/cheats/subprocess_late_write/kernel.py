# ruff: noqa
"""DPS: a child process (not a thread) writes the answer into the shared buffer file after the call returned."""

import os
import time

import torch


def run(x, weight, y):
    y.zero_()
    if os.fork() == 0:
        time.sleep(0.005)
        torch.mul(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6), weight, out=y)
        os._exit(0)
