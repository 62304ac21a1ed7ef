"""The GPU path of the attribution on a synthetic profiler event tree (kernels, launches, regions, backward)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch

from solkit.model.attribute import attribute
from solkit.model.work import StepWork, TracedOp
from solkit.sol.counting import OpCount
from solkit.sol.trace import OpRecord, TensorMeta

CUDA = NS(name="CUDA")
CPU = NS(name="CPU")


def _evt(name, parent=None, kernels=(), shapes=(), seq=-1, kwinputs=None):
    e = NS(name=name, cpu_parent=parent, cpu_children=[], kernels=[NS(name=k, duration=us) for k, us in kernels],
           input_shapes=[list(s) for s in shapes], sequence_nr=seq, kwinputs=kwinputs or {}, device_type=CPU,
           cpu_time_total=0.0)  # fmt: skip
    if parent is not None:
        parent.cpu_children.append(e)
    return e


def _device(us, annotation=False):
    return NS(name="kernel", cpu_parent=None, device_type=CUDA, time_range=NS(elapsed_us=lambda: us), kernels=[],
              is_user_annotation=annotation)  # fmt: skip


def _traced(name, shapes, flops, nbytes):
    metas = [TensorMeta(tuple(s), torch.bfloat16, ()) for s in shapes]
    rec = OpRecord(name, "aten", "default", metas, metas[:1], {f"a{i}": m for i, m in enumerate(metas)})
    key = tuple(tuple(s) for s in shapes if s)  # as record_key: 0-dim tensors leave no shape
    return TracedOp(rec, OpCount(f"aten.{name}", {"bf16_tensor": flops}, nbytes), name, key)


@pytest.fixture
def tree():
    mlp = _evt("solkit.module::model.layers.0.mlp::LlamaMLP")
    lin = _evt("solkit.module::model.layers.0.mlp.up_proj::Linear", mlp)
    linear = _evt("aten::linear", lin)
    mm = _evt("aten::mm", linear, kernels=[("sm90_gemm", 300.0)], shapes=[(16, 8), (8, 32)], seq=7)
    bwd = _evt("autograd::engine::evaluate_function: MmBackward0", seq=7)
    mm_b = _evt("aten::mm", _evt("MmBackward0", bwd), kernels=[("sm90_gemm_b", 250.0)], shapes=[(32, 16), (16, 8)])
    region = _evt("triton_red_fused_add_mean_rsqrt_0", kernels=[("triton_red_fused_add_mean_rsqrt_0", 40.0)],
                  kwinputs={"kernel_num_gb": 0.002, "kernel_name": "triton_red_fused_add_mean_rsqrt_0"})  # fmt: skip
    stray = _evt("aten::_local_scalar_dense", kernels=[("memcpy", 10.0)])
    # the module scope mirrored on the device timeline (a user annotation) spans kernels already counted
    events = [mlp, lin, linear, mm, bwd, mm_b, region, stray, *(_device(us) for us in (300.0, 250.0, 40.0, 10.0, 5.0)),
              _device(300.0, annotation=True)]  # fmt: skip
    fwd, bwd_op = _traced("mm", [(16, 8), (8, 32)], 2 * 16 * 8 * 32, 1000), _traced("mm", [(32, 16), (16, 8)], 99, 7)
    work = StepWork([fwd, bwd_op])
    return events, work


def test_kernels_go_to_the_outermost_traced_op_and_regions(tree):
    events, work = tree
    rows, total = attribute(events, work, on_gpu=True)
    assert total == pytest.approx(605e-6)  # every device event, linked or not
    by = {(r.op, r.backward): r for r in rows}
    fwd = by["mm", False]
    assert fwd.time_s == pytest.approx(300e-6) and fwd.flops == {"bf16_tensor": 2 * 16 * 8 * 32}
    assert (fwd.category, fwd.layer, fwd.module_type, fwd.match) == ("mlp", "layers.0", "Linear", "shapes")
    bwd = by["mm", True]
    assert bwd.flops == {"bf16_tensor": 99} and bwd.category == "mlp"  # the forward's module, by sequence number
    region = by["triton_red_fused_add_mean_rsqrt_0", False]
    assert region.kind == "region" and region.bytes == pytest.approx(2e6) and region.category == "norms"
    stray = by["_local_scalar_dense", False]
    assert stray.kind == "unattributed" and stray.time_s == pytest.approx(10e-6)
    unlinked = by["(kernels with no CPU launch)", False]
    assert unlinked.time_s == pytest.approx(5e-6)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_optimizer_kernels_go_to_the_multi_tensor_ops(impl):
    """multi_tensor_apply kernels under aten::_foreach_* / aten::_fused_adamw_ (no shapes: the profiler records
    none for tensor lists) meet the traced calls over the parameters, not the scalar step-counter update."""
    opt = _evt("solkit.optimizer")
    mta = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata>"
    names = (
        ["_foreach_add_", "_foreach_mul_", "_foreach_add_"] if impl == "foreach" else ["_foreach_add_", "_fused_adamw_"]
    )
    on_gpu = names[1:] if impl == "foreach" else names  # the foreach path's counter update runs on the CPU
    events = [opt] + [_evt(f"aten::{n}", opt, kernels=[(mta, 20.0 + i)], shapes=[[]]) for i, n in enumerate(on_gpu)]
    params = [(64, 32), (7,)]
    traced = [_traced(names[0].rstrip("_"), [()] * 2, 2, 8)]  # the step counters: 0-dim tensors
    traced += [_traced(n.rstrip("_"), params, 1000 + i, 5000 + i) for i, n in enumerate(names[1:])]
    rows, total = attribute(events, StepWork(traced), on_gpu=True)
    assert all(r.category == "optimizer" and r.match in ("order", "shapes") and r.kernels == [mta] for r in rows)
    if impl == "foreach":  # the sized add (eps) is the one profiled, not the counters' add
        assert [(r.op, r.bytes) for r in rows] == [("_foreach_mul", 5000), ("_foreach_add", 5001)]
    else:
        assert [(r.op, r.bytes) for r in rows] == [("_foreach_add", 8), ("_fused_adamw", 5000)]
    assert total == pytest.approx(sum(20.0 + i for i in range(len(on_gpu))) * 1e-6)


def test_annotation_spans_appended_as_kernels_are_not_device_work():
    # torch appends a record_function's device-side annotation to its CPU event as a "kernel": the optimizer scope's
    # span and an Inductor range's span (same name as its kernel) must not count on top of the kernels inside them.
    opt = _evt("solkit.optimizer", kernels=[("solkit.optimizer", 400.0)])
    addcdiv = _evt("aten::_foreach_addcdiv_", opt, kernels=[("multi_tensor_apply_kernel", 3.0)])
    k = "triton_poi_fused_mul_0"
    region = _evt(k, kernels=[(k, 40.0), (k, 40.0)], kwinputs={"kernel_num_gb": 0.001})
    spans = [NS(name=n, device_type=CUDA, is_user_annotation=True, time_range=NS(elapsed_us=lambda us=us: us),
                kernels=[]) for n, us in (("solkit.optimizer", 400.0), ("triton_poi_fused_mul_0", 40.0))]  # fmt: skip
    events = [opt, addcdiv, region, _device(3.0), _device(40.0), *spans]
    rows, total = attribute(events, StepWork([]), on_gpu=True)
    assert total == pytest.approx(43e-6)  # the two kernels, once each
    assert sum(r.time_s for r in rows) == pytest.approx(43e-6)
