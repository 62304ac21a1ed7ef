"""Launches the work on a side stream (after a spin) and returns without joining it.

Events on the current stream see nothing of it."""

import torch

_stream = None


def run(x, weight):
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    y = torch.empty_like(x)
    _stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_stream):
        torch.cuda._sleep(2_000_000)  # ~1 ms of spinning so the late write is certain
        torch.mul(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6), weight, out=y)
    return y
