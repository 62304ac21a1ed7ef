"""The GPU path of the attribution on a synthetic profiler event tree (kernels, launches, regions, backward)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace as NS

import pytest
import torch

from solkit.model.attribute import attribute
from solkit.model.device_events import is_runtime
from solkit.model.work import StepWork, TracedOp
from solkit.sol.counting import OpCount
from solkit.sol.trace import OpRecord, TensorMeta

CUDA = NS(name="CUDA")
CPU = NS(name="CPU")
_ids = itertools.count(1)


def _evt(name, parent=None, kernels=(), shapes=(), seq=-1, kwinputs=None):
    """A CPU event; ``kernels`` (name, us) become device events it launched (see :func:`_profile`)."""
    i = next(_ids)
    e = NS(name=name, cpu_parent=parent, cpu_children=[], kernels=[], input_shapes=[list(s) for s in shapes],
           sequence_nr=seq, kwinputs=kwinputs or {}, device_type=CPU, cpu_time_total=0.0, id=i, is_async=False,
           time_range=NS(start=10.0 * i, end=10.0 * i + 5))  # fmt: skip
    e.launches = [_device(k, us, e) for k, us in kernels]
    if parent is not None:
        parent.cpu_children.append(e)
    return e


def _device(name, us, launcher=None, annotation=False, start=None):
    start = (launcher.time_range.start + 1 if launcher else 0.0) if start is None else start
    return NS(name=name, cpu_parent=None, device_type=CUDA, kernels=[], is_user_annotation=annotation,
              linked_correlation_id=launcher.id if launcher else 0, device_resource_id=7,
              time_range=NS(start=start, end=start + us, elapsed_us=lambda: us))  # fmt: skip


def _profile(cpu: list, extra_device=(), linking="ids") -> list:
    """The events as torch's profiler gives them: the device events, and on each CPU event the kernel list of every
    device event whose linked id is its id. ``linking="lists"``: a torch whose events carry no linked ids."""
    device = [d for e in cpu for d in e.launches] + list(extra_device)
    for e in cpu:
        e.kernels = [NS(name=d.name, duration=d.time_range.elapsed_us()) for d in device
                     if d.linked_correlation_id == e.id]  # fmt: skip
    if linking == "lists":
        for d in device:
            del d.linked_correlation_id
    return cpu + device


def _traced(name, shapes, flops, nbytes):
    metas = [TensorMeta(tuple(s), torch.bfloat16, ()) for s in shapes]
    rec = OpRecord(name, "aten", "default", metas, metas[:1], {f"a{i}": m for i, m in enumerate(metas)})
    key = tuple(tuple(s) for s in shapes if s)  # as record_key: 0-dim tensors leave no shape
    return TracedOp(rec, OpCount(f"aten.{name}", {"bf16_tensor": flops}, nbytes), name, key)


LINKING = ["ids", "lists"]


@pytest.fixture(params=LINKING)
def tree(request):
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
    extra = [_device("other_process_kernel", 5.0), _device(mlp.name, 300.0, mlp, annotation=True)]
    cpu = [mlp, lin, linear, mm, bwd, bwd.cpu_children[0], mm_b, region, stray]
    fwd, bwd_op = _traced("mm", [(16, 8), (8, 32)], 2 * 16 * 8 * 32, 1000), _traced("mm", [(32, 16), (16, 8)], 99, 7)
    return _profile(cpu, extra, request.param), StepWork([fwd, bwd_op])


def test_kernels_go_to_the_outermost_traced_op_and_regions(tree):
    events, work = tree
    stats: dict = {}
    rows, total = attribute(events, work, on_gpu=True, stats=stats)
    assert total == pytest.approx(605e-6)  # every device event, linked or not, the annotation span left out
    assert stats["dropped_ms"] == {"annotation or sync span": pytest.approx(0.3)}
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


@pytest.mark.parametrize("linking", LINKING)
@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_optimizer_kernels_go_to_the_multi_tensor_ops(impl, linking):
    """multi_tensor_apply kernels under aten::_foreach_* / aten::_fused_adamw_ (no shapes: the profiler records
    none for tensor lists) meet the traced calls over the parameters, not the scalar step-counter update."""
    opt = _evt("solkit.optimizer")
    mta = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata>"
    names = (
        ["_foreach_add_", "_foreach_mul_", "_foreach_add_"] if impl == "foreach" else ["_foreach_add_", "_fused_adamw_"]
    )
    on_gpu = names[1:] if impl == "foreach" else names  # the foreach path's counter update runs on the CPU
    cpu = [opt] + [_evt(f"aten::{n}", opt, kernels=[(mta, 20.0 + i)], shapes=[[]]) for i, n in enumerate(on_gpu)]
    params = [(64, 32), (7,)]
    traced = [_traced(names[0].rstrip("_"), [()] * 2, 2, 8)]  # the step counters: 0-dim tensors
    traced += [_traced(n.rstrip("_"), params, 1000 + i, 5000 + i) for i, n in enumerate(names[1:])]
    rows, total = attribute(_profile(cpu, linking=linking), StepWork(traced), on_gpu=True)
    assert all(r.category == "optimizer" and r.match in ("order", "shapes") and r.kernels == [mta] for r in rows)
    if impl == "foreach":  # the sized add (eps) is the one profiled, not the counters' add
        assert [(r.op, r.bytes) for r in rows] == [("_foreach_mul", 5000), ("_foreach_add", 5001)]
    else:
        assert [(r.op, r.bytes) for r in rows] == [("_foreach_add", 8), ("_fused_adamw", 5000)]
    assert total == pytest.approx(sum(20.0 + i for i in range(len(on_gpu))) * 1e-6)


@pytest.mark.parametrize("linking", LINKING)
def test_annotation_spans_appended_as_kernels_are_not_device_work(linking):
    # torch appends a record_function's device-side annotation to its CPU event as a "kernel": the optimizer scope's
    # span and an Inductor range's span (same name as its kernel) must not count on top of the kernels inside them.
    opt = _evt("solkit.optimizer")
    addcdiv = _evt("aten::_foreach_addcdiv_", opt, kernels=[("multi_tensor_apply_kernel", 3.0)])
    k = "triton_poi_fused_mul_0"
    region = _evt(k, kernels=[(k, 40.0)], kwinputs={"kernel_num_gb": 0.001})
    spans = [_device(opt.name, 400.0, opt, annotation=True), _device(k, 40.0, region, annotation=True)]
    rows, total = attribute(_profile([opt, addcdiv, region], spans, linking), StepWork([]), on_gpu=True)
    assert total == pytest.approx(43e-6)  # the two kernels, once each
    assert sum(r.time_s for r in rows) == pytest.approx(43e-6)


def _optimizer_tail():
    """A backward mm on the autograd thread, then the optimizer's last op on the main thread."""
    mm = _evt("aten::mm", kernels=[("sm90_gemm_b", 250.0)], shapes=[(32, 16), (16, 8)])
    opt = _evt("solkit.optimizer")
    addcdiv = _evt("aten::_foreach_addcdiv_", opt, kernels=[("multi_tensor_apply_kernel", 3.0)])
    return [mm, opt, addcdiv], StepWork([_traced("mm", [(32, 16), (16, 8)], 99, 7)])


@pytest.mark.parametrize("linking", LINKING)
def test_a_correlation_id_shared_by_two_cpu_events_hands_its_kernels_to_one(linking):
    # torch hands every device event linked to an id to each CPU event with that id: the mm's kernel would count
    # twice, once on the optimizer's addcdiv. It goes to the CPU event that started last before it did.
    cpu, work = _optimizer_tail()
    mm, _, addcdiv = cpu
    gemm = mm.launches[0]
    addcdiv.id = mm.id
    addcdiv.launches[0].linked_correlation_id = mm.id
    gemm.time_range.start, gemm.time_range.end = addcdiv.time_range.start - 2, addcdiv.time_range.start + 248
    events = list(reversed(_profile(cpu, linking=linking)))  # the order of the events must not matter
    assert sum(k.duration for k in addcdiv.kernels) == pytest.approx(253.0)  # torch's lists: the mm's kernel twice
    rows, total = attribute(events, work, on_gpu=True)
    assert total == pytest.approx(253e-6)
    by = {r.op: r.time_s for r in rows}
    assert by == {"mm": pytest.approx(250e-6), "_foreach_addcdiv": pytest.approx(3e-6)}


@pytest.mark.parametrize("linking", LINKING)
def test_device_time_outside_the_step_and_duplicate_events_count_once(linking):
    cpu, work = _optimizer_tail()
    mm, _, addcdiv = cpu
    # the optimizer's kernel recorded as running far past the step (wall 1 ms), and the mm's kernel reported twice
    addcdiv.launches[0].time_range = NS(start=addcdiv.time_range.start + 1, end=addcdiv.time_range.start + 365_001,
                                        elapsed_us=lambda: 365_000.0)  # fmt: skip
    twin = NS(**vars(mm.launches[0]))
    stats: dict = {}
    rows, total = attribute(_profile(cpu, [twin], linking), work, on_gpu=True, wall_s=1e-3, stats=stats)
    by = {r.op: r.time_s for r in rows}
    assert by["_foreach_addcdiv"] <= 1e-3 * 1.02 + 1e-3  # the step's wall time bounds it (with the window's slack)
    assert by["mm"] == pytest.approx(250e-6) and total < 3e-3
    dropped = stats["dropped_ms"]
    assert dropped["the same device event twice"] == pytest.approx(0.25) and dropped["outside the step's window"] > 363
    assert 0 < stats["device_busy_ms"] <= total * 1e3 + 1e-9  # the union of the counted intervals


@pytest.mark.parametrize("linking", LINKING)
def test_a_launch_calls_cupti_id_equal_to_an_ops_id_takes_none_of_its_kernels(linking):
    # A runtime call's id is its CUPTI correlation, an op's id torch's own counter: where the numbers meet, torch hands
    # the op's kernels to the launch call too, and the call sits under the op that made it (the optimizer's addcdiv).
    cpu, work = _optimizer_tail()
    mm, _, addcdiv = cpu
    launch = _evt("cudaLaunchKernel", addcdiv)
    launch.id = mm.id
    gemm = mm.launches[0]  # the GPU runs behind: the mm's kernel starts after the optimizer's launch call
    gemm.time_range.start, gemm.time_range.end = launch.time_range.start + 1, launch.time_range.start + 251
    events = list(reversed(_profile([*cpu, launch], linking=linking)))  # the launch call comes first
    assert [k.name for k in launch.kernels] == ["sm90_gemm_b"]  # what torch's lists say
    rows, total = attribute(events, work, on_gpu=True)
    assert {r.op: r.time_s for r in rows} == {"mm": pytest.approx(250e-6), "_foreach_addcdiv": pytest.approx(3e-6)}
    assert total == pytest.approx(253e-6)


def test_runtime_calls_are_told_from_ops():
    assert all(is_runtime(NS(name=n)) for n in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync"))
    assert not any(is_runtime(NS(name=n)) for n in ("aten::mm", "cudnn_convolution", "solkit.optimizer", "custom"))


def test_a_shared_id_goes_to_the_op_whose_span_holds_the_launch_call():
    # The GPU runs far behind: the mm's kernel starts after a later op began. Of the CPU events sharing its id (a
    # module range around the mm, the mm, a later op), the launch call (its CUPTI id is the kernel's own id) decides.
    cpu, work = _optimizer_tail()
    mm, _, addcdiv = cpu
    scope = _evt("solkit.module::model.lm_head::Linear")
    scope.time_range.start, scope.time_range.end = mm.time_range.start - 2, mm.time_range.end + 2
    launch = _evt("cudaLaunchKernel", mm)
    launch.time_range.start, launch.time_range.end = mm.time_range.start + 1, mm.time_range.start + 2
    gemm = mm.launches[0]
    gemm.id = launch.id
    gemm.time_range.start, gemm.time_range.end = addcdiv.time_range.start + 2, addcdiv.time_range.start + 252
    scope.id = addcdiv.id = mm.id
    addcdiv.launches[0].linked_correlation_id = mm.id
    rows, total = attribute(_profile([scope, *cpu, launch]), work, on_gpu=True)
    assert {r.op: r.time_s for r in rows} == {"mm": pytest.approx(250e-6), "_foreach_addcdiv": pytest.approx(3e-6)}


@pytest.mark.parametrize("linking", LINKING)
def test_an_annotation_span_handed_to_an_op_by_a_shared_id_is_not_counted(linking):
    # A module range's span on the GPU timeline carries the range's id; an op with the same id gets it in its kernel
    # list too. Leaving one copy of each span out (by name and duration) still counted the other on the op.
    cpu, work = _optimizer_tail()
    mm, _, addcdiv = cpu
    scope = _evt("solkit.module::model.layers.0::LlamaDecoderLayer")
    span = _device(scope.name, 40_000.0, scope, annotation=True)
    addcdiv.id = scope.id
    addcdiv.launches[0].linked_correlation_id = scope.id
    events = _profile([scope, *cpu], [span], linking)
    assert scope.name in [k.name for k in addcdiv.kernels]  # what torch's lists say
    rows, total = attribute(events, work, on_gpu=True)
    assert total == pytest.approx(253e-6)
    assert {r.op: r.time_s for r in rows}["_foreach_addcdiv"] == pytest.approx(3e-6)


# The multi-tensor AdamW program: the measured (non-capturable) step on a GPU, and the traced twin (capturable:
# its bias corrections are _foreach ops over 0-dim tensors, plus a second division by the step size). "s": a call
# over the 0-dim step counters or bias corrections, "P": over parameters, gradients or state.
_MEASURED = ["add:s", "mul:P", "lerp:P", "mul:P", "addcmul:P", "sqrt:P", "div:P", "add:P", "addcdiv:P"]
_TWIN = ["add:s", "mul:P", "lerp:P", "mul:P", "addcmul:P", "pow:s", "pow:s", "sub:s", "sub:s", "neg:s", "div:s",
         "reciprocal:s", "sqrt:s", "sqrt:P", "div:P", "add:P", "div:P", "addcdiv:P"]  # fmt: skip


def _twin(program, params=((64, 32), (7,)), base=5000):
    out = []
    for i, call in enumerate(program):
        name, what = call.split(":")
        shapes = list(params) if what == "P" else [()] * len(params)
        out.append(_traced(f"_foreach_{name}", shapes, 1000 + i if what == "P" else 2, base + i if what == "P" else 8))
    return out


def _optimizer_step(program, counters_on_gpu=False):
    """One step's events: each call an aten::_foreach_* with no shapes (tensor lists); the counters' update launches
    no kernel where the counters live on the CPU (AdamW's non-capturable multi-tensor path)."""
    opt = _evt("solkit.optimizer")
    mta = "multi_tensor_apply_kernel"
    cpu = [opt]
    for i, call in enumerate(program):
        name, what = call.split(":")
        kernels = [(mta, 2.0 if what == "s" else 100.0 + i)] if what == "P" or counters_on_gpu else []
        cpu.append(_evt(f"aten::_foreach_{name}_", opt, kernels=kernels, shapes=[[]]))
    return cpu


@pytest.mark.parametrize("measured", ["non-capturable", "capturable"])
def test_multi_tensor_calls_meet_their_traced_calls_in_program_order_in_every_step(measured):
    """Without shapes, a profiled _foreach call meets the traced call of the same place in the program: never the
    twin's 0-dim bias correction of the same name (_foreach_sqrt, _foreach_div), and the same one in every step."""
    program = _MEASURED if measured == "non-capturable" else _TWIN
    work = StepWork(_twin(_TWIN))
    steps = []
    for _ in range(3):  # the same StepWork for every profiled step, as analyze() uses it
        rows, total = attribute(_profile(_optimizer_step(program, measured == "capturable")), work, on_gpu=True)
        steps.append([(r.op, r.bytes, r.match, r.time_s) for r in rows])
    assert steps[0] == steps[1] == steps[2]
    want = [(f"_foreach_{c.split(':')[0]}", 5000 + j) for j, c in enumerate(_TWIN) if c.endswith("P")]
    if measured == "non-capturable":  # the twin's second division (by the step size) has no measured call
        want = [w for w in want if w != ("_foreach_div", 5016)]
    got = [(op, b) for op, b, _, t in steps[0] if b > 8]
    assert got == want
    # every kernel over parameters carries parameter-sized work; only the 0-dim calls carry 0-dim work
    assert all((b > 8) == (t > 50e-6) for _, b, _, t in steps[0])


@pytest.mark.parametrize("twin", ["same size", "none"])
@pytest.mark.parametrize("name,args,itemsize", [("zeros", [[1027, 33], 15, None, None, False], 2),
                                                ("full", [[5, 3, 7], 0.0, 6, None, None, False], 4),
                                                ("ones", [[9], None, None, None, False], 4)])  # fmt: skip
def test_a_fill_meets_the_traced_fill_of_its_size_or_is_charged_its_output(name, args, itemsize, twin):
    """A fill has no tensor argument (no shapes): under torch.compile Inductor zeroes its own buffers, which the eager
    trace has no twin of. It meets a traced fill of the size the profiler recorded, never one of another size (a
    0-element one), else it is charged the output it writes."""
    size = args[0]
    evt = _evt(f"aten::{name}", kernels=[("Memset (Device)", 30.0)], shapes=[[]] * len(args))
    evt.concrete_inputs = args
    other = _traced(name, [], 0, 0)
    other.record.outputs = [TensorMeta((0,), torch.float32, (1,))]
    traced = [other]
    if twin == "same size":
        same = _traced(name, [], 0, 12345)
        same.record.outputs = [TensorMeta(tuple(size), torch.float32, ())]
        traced.append(same)
    for _ in range(2):  # every step alike
        (row,), total = attribute(_profile([evt]), StepWork(traced), on_gpu=True)
        n = 1
        for d in size:
            n *= d
        assert row.bytes == (12345 if twin == "same size" else n * itemsize) and row.match in ("shapes", "size")
        assert tuple(row.out_shape) == tuple(size) and total == pytest.approx(30e-6)


def test_each_parameter_groups_calls_meet_that_groups_traced_calls():
    """Multi-tensor AdamW runs its whole program once per group of parameters (by device and dtype): the second
    group's _foreach_div is its own, not the first group's second (twin-only) division by the step size."""
    work = StepWork(_twin(_TWIN) + _twin(_TWIN, ((5, 3),), base=7000))
    rows, _ = attribute(_profile(_optimizer_step(_MEASURED + _MEASURED)), work, on_gpu=True)
    want = [(f"_foreach_{c.split(':')[0]}", j) for j, c in enumerate(_TWIN) if c.endswith("P") and j != 16]
    assert [(r.op, r.bytes) for r in rows if r.bytes > 8] == [(op, base + j) for base in (5000, 7000) for op, j in want]
