import torch

from solkit.kernels.gemm.dispatch import gemm


@torch.no_grad()
def run(x, w):
    return gemm(x, w)
