"""A module's parameters and buffers are inputs: fused bytes by hand, the per-op view and group bytes."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from solkit.sol.analysis import analyze
from solkit.sol.opview import op_views, region_bytes


def wide_mlp(k: int, hidden: int, n: int, dtype: torch.dtype) -> nn.Module:
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, n)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,k,hidden,n", [(4, 16, 1024, 8), (3, 7, 4099, 5)])
def test_wide_mlp_fused_bytes_by_hand(m, k, hidden, n, dtype):
    a = analyze(wide_mlp(k, hidden, n, dtype), ((m, k), dtype))
    size = dtype.itemsize
    weights = k * hidden + hidden * n
    biases = hidden + n
    assert a.fused_bytes == size * (weights + biases + m * k + m * n)
    assert {b.name: b.kind for b in a.boundary} == {
        "arg0": "input",
        "0.weight": "parameter",
        "0.bias": "parameter",
        "2.weight": "parameter",
        "2.bias": "parameter",
    }
    dt = str(dtype).removeprefix("torch.")
    nbytes = size * k * hidden
    first_weight = {"name": "0.weight", "kind": "parameter", "shape": [hidden, k], "dtype": dt, "bytes": nbytes}
    assert a.to_dict()["inputs"][1] == first_weight


def test_weights_dominate_a_shallow_wide_mlp():
    # KernelBench level 3's ShallowWideMLP shape class: a tiny batch through huge layers reads its weights.
    a = analyze(wide_mlp(1000, 50000, 10, torch.float32), ((1, 1000), torch.float32))
    assert a.fused_bytes > 4 * 1000 * 50000
    assert a.fused_bytes / (4 * (1000 + 10)) > 1e4


def test_conv_net_counts_weights_buffers_and_running_stat_updates():
    with torch.device("meta"):
        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 5, 1, bias=False))
    x = ((2, 3, 9, 7), torch.float32)
    a = analyze(net, x)  # training mode: the running statistics are read and written back
    params = 4 * (8 * 3 * 9 + 8 + 8 + 8 + 5 * 8)  # conv weight and bias, bn weight and bias, 1x1 conv weight
    buffers = 4 * (8 + 8) + 8  # running_mean, running_var (fp32), num_batches_tracked (int64)
    io = 4 * (2 * 3 * 9 * 7 + 2 * 5 * 9 * 7)
    assert a.fused_bytes == params + io + 2 * buffers  # the buffers are read, then written back
    assert sorted(b.name for b in a.written) == ["1.num_batches_tracked", "1.running_mean", "1.running_var"]
    ev = analyze(net.eval(), x)
    assert ev.written == [] and ev.fused_bytes == params + io + buffers


def test_closure_over_a_cpu_model_names_its_parameters_and_counts_gradients():
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))

    def step(x):
        model(x).sum().backward()

    a = analyze(step, ((5, 6), torch.float32), module=model)
    assert [b.name for b in a.boundary] == ["arg0", "0.weight", "0.bias", "2.weight", "2.bias"]
    assert sorted(b.name for b in a.written) == ["0.bias.grad", "0.weight.grad", "2.bias.grad", "2.weight.grad"]
    n_params = 6 * 10 + 10 + 10 * 3 + 3
    assert a.fused_bytes == 4 * (5 * 6 + 2 * n_params)
    assert model[0].weight.grad is None  # the real model is untouched


def test_op_views_attribute_parameters_through_views():
    a = analyze(wide_mlp(16, 64, 8, torch.float32), ((4, 16), torch.float32))
    views = op_views(a)
    mms = [v for v in views if v.op == "aten.addmm"]
    assert [sorted(b.name for b in v.reads) for v in mms] == [["0.bias", "0.weight", "arg0"], ["2.bias", "2.weight"]]
    assert mms[0].parameter_bytes == 4 * (16 * 64 + 64) and mms[0].flops == {"fp32_vector": 2 * 4 * 64 * 16 + 4 * 64}
    assert sum(v.bytes for v in views) == a.unfused_bytes


def test_region_bytes_is_the_fused_rule_on_a_group_of_ops():
    a = analyze(wide_mlp(16, 64, 8, torch.float32), ((4, 16), torch.float32))
    recs = a.trace.records
    assert region_bytes(a.trace, range(len(recs))) == a.fused_bytes
    first = [i for i, r in enumerate(recs) if i <= [r.name for r in recs].index("addmm")]
    # x, W1, b1 in; the hidden activation out (the ReLU outside the group reads it)
    assert region_bytes(a.trace, first) == 4 * (4 * 16 + 16 * 64 + 64 + 4 * 64)


KB_BN = """import torch
import torch.nn as nn

batch_size = 2
channels = 3
size = 5


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.register_buffer("scale", torch.ones(channels, 1, 1))

    def forward(self, x):
        return self.bn(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
"""


def test_kernelbench_buffers_are_inputs_and_construction_is_not_work(tmp_path):
    from solkit.problems.kernelbench import import_file
    from solkit.sol.analysis import analyze_problem

    src = tmp_path / "level1" / "1_bn_scale.py"
    src.parent.mkdir()
    src.write_text(KB_BN)
    imp = import_file(src, tmp_path / "out")
    assert imp.error is None
    [r] = analyze_problem(imp.out, allow_tf32=False)
    a = r.analysis
    assert [c.op for c in a.calls] == ["aten.add_", "aten.empty", "aten.native_batch_norm", "aten.mul"]  # no init ops
    x, c = 2 * 3 * 5 * 5, 3
    stats = 4 * 2 * c  # running mean and variance: read, and written back in training mode
    # x and the output, the bn weight and bias (inputs of run), the scale buffer, the statistics read and written
    assert a.fused_bytes == 4 * (2 * x + 2 * c + c) + 2 * stats
    assert sorted(b.kind for b in a.written) == ["captured", "captured"]
