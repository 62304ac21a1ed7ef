import torch

from solkit.kernels.softmax.dispatch import softmax


@torch.no_grad()
def run(x):
    return softmax(x, dim=-1)
