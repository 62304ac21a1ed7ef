"""Tracing on meta tensors: what is recorded, and that no tensor storage is ever allocated."""

from __future__ import annotations

import resource

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.sol.trace import TensorMeta, to_meta, trace


def meta(*shape, dtype=torch.bfloat16, grad=False):
    t = torch.empty(shape, dtype=dtype, device="meta")
    return t.requires_grad_(True) if grad else t


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def test_records_ops_with_shapes_dtypes_strides():
    tr = trace(lambda a, b: (a @ b).float().sum(-1), meta(4, 8), meta(8, 3))
    names = [r.qualified_name for r in tr.records]
    assert names == ["aten.mm", "aten._to_copy", "aten.sum"]
    mm = tr.records[0]
    assert mm.inputs == [TensorMeta((4, 8), torch.bfloat16, (8, 1)), TensorMeta((8, 3), torch.bfloat16, (3, 1))]
    assert mm.outputs == [TensorMeta((4, 3), torch.bfloat16, (3, 1))]
    assert tr.records[2].args["dim"] == [-1]
    assert tr.inputs == mm.inputs and tr.outputs == [TensorMeta((4,), torch.float32, (1,))]


def test_views_are_flagged():
    tr = trace(lambda x: x.t().unsqueeze(0).expand(2, -1, -1), meta(3, 5))
    assert [(r.name, r.is_view) for r in tr.records] == [("t", True), ("unsqueeze", True), ("expand", True)]
    # a stride-0 (broadcast) dimension is one read
    assert tr.outputs[0].footprint_bytes == 2 * 15 and tr.outputs[0].nbytes == 2 * 30


def test_real_tensors_become_meta_without_copying():
    x = torch.randn(6, 4)
    tr = trace(lambda t: t * 2, x)
    assert tr.result.is_meta and tr.inputs == [TensorMeta((6, 4), torch.float32, (4, 1))]
    assert to_meta(x).is_meta and to_meta(x).stride() == x.stride()


def test_factory_calls_and_explicit_devices_stay_on_meta():
    def reference(x):
        pos = torch.arange(x.shape[0], device="cuda")  # written for a GPU
        mask = torch.ones(x.shape, dtype=torch.bool).tril()  # no device: would be a CPU tensor
        return x.to("cuda").masked_fill(mask, 0.0) + pos[:, None].cuda().float()

    tr = trace(reference, torch.randn(8, 8))
    assert tr.result.is_meta
    assert {r.name for r in tr.records} >= {"arange", "ones", "tril", "masked_fill", "add"}


def test_inplace_out_and_copy_reads_and_writes():
    def fn(x, y):
        z = torch.empty_like(x)
        z.copy_(x)
        z.mul_(y)
        torch.add(x, y, out=z)
        return z

    tr = trace(fn, meta(4), meta(4))
    rec = {r.name: r for r in tr.records}
    assert len(rec["copy_"].inputs) == 1  # the destination is written, not read
    assert len(rec["mul_"].inputs) == 2 and len(rec["mul_"].outputs) == 1
    assert len(rec["add"].inputs) == 2 and len(rec["add"].outputs) == 1  # out= is not read


def test_attention_is_kept_whole_with_its_backward():
    q = meta(2, 4, 16, 8, grad=True)

    def fwd_bwd(q, k, v):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.sum().backward()
        return o

    tr = trace(fwd_bwd, q, meta(2, 4, 16, 8, grad=True), meta(2, 4, 16, 8, grad=True))
    names = [r.qualified_name for r in tr.records]
    assert "solkit.scaled_dot_product_attention" in names
    assert "solkit.scaled_dot_product_attention_backward" in names
    assert "aten.bmm" not in names and "aten._safe_softmax" not in names  # no math decomposition
    fwd = tr.records[names.index("solkit.scaled_dot_product_attention")]
    assert fwd.args["is_causal"] is True
    assert fwd.outputs[1] == TensorMeta((2, 4, 16), torch.float32, (64, 16, 1))  # the saved log-sum-exp


def test_data_dependent_op_is_a_one_line_error():
    with pytest.raises(SolkitError) as err:
        trace(lambda x: x[x > 0].sum().item(), torch.randn(5))
    msg = str(err.value)
    assert "\n" not in msg and "tracing" in msg


def test_large_shapes_allocate_no_storage():
    """A 16384 x 128256 cross-entropy (4.2 GB of bf16 logits) and an 8192 x 28672 x 8192 GEMM."""
    trace(lambda a, b: F.cross_entropy(a, b), meta(4, 8), meta(4, dtype=torch.long))  # warm-up
    before = peak_rss_bytes()
    tr1 = trace(F.cross_entropy, meta(16384, 128256), meta(16384, dtype=torch.long))
    tr2 = trace(torch.mm, meta(8192, 8192), meta(8192, 28672))
    grown = peak_rss_bytes() - before
    assert grown < 64 * 2**20, f"peak RSS grew by {grown / 2**20:.0f} MiB"
    assert tr1.result.is_meta and tr2.result.is_meta
    assert tr2.outputs[0].nbytes == 8192 * 28672 * 2  # 470 MB that were never allocated


def test_tensor_to_keeps_dtype_and_layout_but_drops_devices():
    def fn(x):
        return (
            x.to("cuda", torch.float16),
            x.to(torch.device("cuda"), dtype=torch.bfloat16, non_blocking=True),
            x.to(memory_format=torch.channels_last),
            x.to("cuda"),
        )

    tr = trace(fn, meta(2, 3, 4, 5, dtype=torch.float32))
    dtypes = [t.dtype for t in tr.result]
    assert dtypes == [torch.float16, torch.bfloat16, torch.float32, torch.float32]
    assert tr.result[2].stride() == (60, 1, 15, 3) and tr.result[3] is not None
