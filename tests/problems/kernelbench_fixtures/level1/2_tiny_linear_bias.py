"""A hand-written KernelBench-style problem: a matmul with a weight and a bias parameter."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x @ weight.T + bias, with both created in __init__."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight.t())


batch_size = 6
in_features = 16
out_features = 24


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
