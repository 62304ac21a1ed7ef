# ruff: noqa
"""Honest use of a side stream: the work runs there and the current stream waits for it before returning."""

import torch
import torch.nn.functional as F

_stream = None


def run(x, weight):
    global _stream
    if _stream is None:
        _stream = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    _stream.wait_stream(cur)
    with torch.cuda.stream(_stream):
        y = F.rms_norm(x, (x.shape[-1],), weight, eps=1e-6)
    cur.wait_stream(_stream)
    y.record_stream(cur)
    return y
