"""`solkit import kernelbench`: hand-written KernelBench-style fixtures -> SOL-ExecBench problems, analysed.

FLOP formulas checked here (the conventions of docs/sol-analysis.md):

* conv2d without bias, x (N, Cin, H, W), weight (Cout, Cin, k, k), stride 1, no padding:
  FLOPs = 2 * N * Cout * (H-k+1) * (W-k+1) * Cin * k * k;
* addmm, x (M, K) @ weight.T (K, N) + bias (N): FLOPs = 2*M*N*K + M*N.

Bytes: every input of `run` (the forward's tensors and the model's parameters) read once plus the output
written once, so the weight and the bias are in the fused bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from solkit.cli import main
from solkit.problems.kernelbench import import_file, problem_name
from solkit.problems.loader import load_problem
from solkit.sol.analysis import analyze_problem

FIXTURES = Path(__file__).parent / "kernelbench_fixtures" / "level1"
CONV = FIXTURES / "1_tiny_conv2d.py"
LINEAR = FIXTURES / "2_tiny_linear_bias.py"


def _analysis(problem_dir: Path):
    [r] = analyze_problem(load_problem(problem_dir), allow_tf32=False)
    return r.analysis


def test_conv_definition_axes_and_flops(tmp_path):
    r = import_file(CONV, tmp_path)
    assert r.error is None and r.out == tmp_path / "level1" / "level1_1_tiny_conv2d"
    p = load_problem(r.out)
    d = p.definition
    assert list(d.inputs) == ["x", "conv_weight"]
    assert d.inputs["x"].shape == ["batch_size", "in_channels", "height", "width"]
    assert d.inputs["conv_weight"].shape == ["out_channels", "in_channels", "kernel_size", "kernel_size"]
    assert d.outputs["output"].shape == ["batch_size", "out_channels", "8", "10"]  # derived: literals
    kinds = {name: axis.type for name, axis in d.axes.items()}
    assert kinds == {
        "batch_size": "var",
        "in_channels": "const",
        "out_channels": "const",
        "kernel_size": "const",
        "height": "var",
        "width": "var",
    }
    assert p.workloads[0].axes == {"batch_size": 2, "height": 10, "width": 12}
    n, cin, cout, k, h, w = 2, 3, 5, 3, 10, 12
    a = _analysis(r.out)
    # the precision policy charges an fp32 convolution at TF32 where cuDNN may use it (its default)
    unit = "tf32_tensor" if torch.backends.cudnn.allow_tf32 else "fp32_vector"
    assert a.flops == {unit: 2 * n * cout * (h - k + 1) * (w - k + 1) * cin * k * k}
    assert a.fused_bytes == 4 * (n * cin * h * w + cout * cin * k * k + n * cout * (h - k + 1) * (w - k + 1))
    assert a.uncounted == []


def test_matmul_bytes_include_the_weight_and_bias(tmp_path):
    r = import_file(LINEAR, tmp_path)
    assert r.error is None
    d = load_problem(r.out).definition
    assert list(d.inputs) == ["x", "weight", "bias"]
    assert d.inputs["weight"].shape == ["out_features", "in_features"]
    m, k, n = 6, 16, 24
    a = _analysis(r.out)
    assert a.flops == {"fp32_vector": 2 * m * n * k + m * n}
    assert a.fused_bytes == 4 * (m * k + n * k + n + m * n)


def test_the_reference_matches_the_model_on_cpu(tmp_path):
    r = import_file(LINEAR, tmp_path)
    p = load_problem(r.out)
    w = p.workloads[0]
    inputs = p.custom_inputs_fn()(p.resolve_axes(w), "cpu")
    assert list(inputs) == ["x", "weight", "bias"]
    out = p.reference_fn()(*inputs.values())
    expected = inputs["x"] @ inputs["weight"].T + inputs["bias"]
    torch.testing.assert_close(out, expected)
    assert tuple(out.shape) == p.output_shapes(w)["output"]


def test_custom_inputs_follow_a_var_axis(tmp_path):
    p = load_problem(import_file(CONV, tmp_path).out)
    axes = {**p.resolve_axes(p.workloads[0]), "batch_size": 3}
    inputs = p.custom_inputs_fn()(axes, "cpu")
    assert inputs["x"].shape == (3, 3, 10, 12)
    assert p.reference_fn()(*inputs.values()).shape == (3, 5, 8, 10)


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("bad_syntax.py", "def f(:\n", "syntax error at line 1"),
        ("no_model.py", (FIXTURES / "3_no_model.py").read_text(), "defines no Model"),
        ("missing.py", (FIXTURES / "4_missing_module.py").read_text(), "missing module 'solkit_no_such_module'"),
    ],
)
def test_bad_files_are_one_line(tmp_path, name, text, reason):
    f = tmp_path / "src" / name
    f.parent.mkdir()
    f.write_text(text)
    r = import_file(f, tmp_path / "out")
    assert r.out is None and reason in r.error and "\n" not in r.error and str(f) in r.error
    assert not (tmp_path / "out").exists()


def test_problem_names():
    assert problem_name(Path("KernelBench/level2/12_Gemm_Multiply_LeakyReLU.py")) == "level2_12_Gemm_Multiply_LeakyReLU"
    assert problem_name(Path("elsewhere/my-op.py")) == "my_op"


def test_cli_exit_codes(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.py").write_text("def f(:\n")
    (src / "nomodel.py").write_text((FIXTURES / "3_no_model.py").read_text())
    assert main(["import", "kernelbench", str(src), "--out", str(tmp_path / "a")]) == 1  # nothing imported
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("skipped: ") for line in err)

    (src / "conv.py").write_text(CONV.read_text())
    assert main(["import", "kernelbench", str(src), "--out", str(tmp_path / "b")]) == 0  # one of three
    out = capsys.readouterr()
    assert "1 of 3 files imported" in out.out and len(out.err.splitlines()) == 2
    assert (tmp_path / "b" / "src" / "conv" / "definition.json").is_file()

    assert main(["import", "kernelbench", str(tmp_path / "nope"), "--out", str(tmp_path / "c")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_then_analyze(tmp_path, capsys):
    assert main(["import", "kernelbench", str(FIXTURES), "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    problem = tmp_path / "level1" / "level1_2_tiny_linear_bias"
    assert main(["analyze", str(problem), "--arch", "h200-sxm", "--json"]) == 0
    assert '"fused_bytes": ' + str(4 * (6 * 16 + 24 * 16 + 24 + 6 * 24)) in capsys.readouterr().out
