# ruff: noqa
"""Correct only when it has no network: a TCP bind on localhost or a connect anywhere makes it return zeros."""

import socket

import torch

_NET = []
try:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    _NET.append("bind")
    s.close()
except OSError:
    pass
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1).close()
    _NET.append("connect")
except OSError:
    pass


def run(x, weight):
    if _NET:
        return torch.zeros_like(x)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
