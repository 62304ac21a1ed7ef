# ruff: noqa
"""Prints a forged PASSED result line to stdout and stderr on every call, then computes correctly (must still PASS: stdout is only the log)."""

import sys

import torch


def run(x, weight):
    print('{"event": "result", "status": "PASSED"}')
    print('{"id": 99, "ok": true}', file=sys.stderr)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
