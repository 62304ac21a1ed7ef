# ruff: noqa
"""Correct only when it cannot write outside its scratch directory (/tmp, the home of the caller, the solkit source)."""

import os

import torch

_ESCAPED = []
for path in (
    "/tmp/solkit_pwned_write_outside",
    "/var/tmp/solkit_pwned_write_outside",
    os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "solkit_pwned"),
):
    try:
        with open(path, "w") as f:
            f.write("pwned")
        _ESCAPED.append(path)
    except OSError:
        pass


def run(x, weight):
    if _ESCAPED:
        return torch.zeros_like(x)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight
