# ruff: noqa
"""gpu_l2_persist without the access-policy window: the same fused RMSNorm on a side stream, joined."""

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
