# ruff: noqa
"""Returns NaN everywhere (the poison value): must not match."""

import torch


def run(x, weight):
    return torch.full_like(x, float("nan"))
