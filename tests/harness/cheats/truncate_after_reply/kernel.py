# ruff: noqa
"""DPS: computes correctly, then a thread truncates every buffer file 1 ms after the call returned, while the judge
reads them (a judge that mapped the files would die of SIGBUS)."""

import glob
import os
import threading
import time

import torch


def _truncate():
    time.sleep(0.001)
    for path in glob.glob("buffers/**/*", recursive=True):
        try:
            os.truncate(path, 0)
        except OSError:
            pass


def run(x, weight, y):
    torch.mul(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6), weight, out=y)
    threading.Thread(target=_truncate, daemon=True).start()
