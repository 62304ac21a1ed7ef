# ruff: noqa
"""A join that joins nothing: the current stream waits on an event recorded on the side stream *before* the
work was queued there, so events and syncs on the current stream see none of the work."""

import torch

_stream = None


def run(x, weight):
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    y = torch.empty_like(x)
    _stream.wait_stream(cur)
    early = torch.cuda.Event()
    early.record(_stream)
    with torch.cuda.stream(_stream):
        torch.cuda._sleep(2_000_000)
        torch.mul(x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6), weight, out=y)
    cur.wait_event(early)
    return y
