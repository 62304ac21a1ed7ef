# ruff: noqa
"""Starts a setsid sleeper and a double-forked daemon at import, then computes correctly: neither may outlive the evaluation."""

import os
import subprocess
import sys

import torch

subprocess.Popen(["sleep", "4242.5"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "4243.5"])
    os._exit(0)


def run(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
