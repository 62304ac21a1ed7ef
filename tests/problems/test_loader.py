import json

import pytest
import torch

from solkit.errors import SolkitError
from solkit.problems.loader import load_problem, load_reference, load_solution

REF = (
    "import torch\n\n"
    "def gen(axes_and_scalars, device):\n"
    "    return {'x': torch.ones(axes_and_scalars['M'], 4, device=device)}\n\n"
    "def run(x, scale):\n"
    "    return x * scale\n"
)


def write_problem(tmp_path, definition=None, workloads=None):
    d = {
        "name": "scale_rows",
        "axes": {
            "M": {"type": "var"},
            "N": {"type": "const", "value": 4},
            "H": {"type": "expr", "expression": "D * 2"},
            "D": {"type": "expr", "expression": "N // 2"},
        },
        "constraints": ["M % 2 == 0", "scale > 0"],
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "bfloat16"}, "scale": {"shape": None, "dtype": "float32"}},
        "outputs": {"y": {"shape": ["M", "H"], "dtype": "bfloat16"}},
        "reference": REF,
        "custom_inputs_entrypoint": "gen",
    }
    d.update(definition or {})
    (tmp_path / "definition.json").write_text(json.dumps(d))
    wls = workloads or [
        {"uuid": "a", "axes": {"M": 6}, "inputs": {"x": {"type": "random"}, "scale": {"type": "scalar", "value": 2.0}}}
    ]
    (tmp_path / "workload.jsonl").write_text("\n".join(json.dumps(w) for w in wls) + "\n")
    return tmp_path


def test_load_problem_resolves_axes_shapes_and_dtypes(tmp_path):
    p = load_problem(write_problem(tmp_path))
    w = p.workloads[0]
    assert p.resolve_axes(w) == {"N": 4, "M": 6, "D": 2, "H": 4}
    assert p.input_shapes(w) == {"x": (6, 4), "scale": None}
    assert p.output_shapes(w) == {"y": (6, 4)}
    assert p.shapes_for(w)["y"] == (6, 4)
    assert p.input_dtypes() == {"x": torch.bfloat16, "scale": torch.float32}
    assert p.scalar_values(w) == {"scale": 2.0}
    run = load_reference(p)
    assert torch.equal(run(torch.ones(2, 4), 3.0), torch.full((2, 4), 3.0))
    assert p.custom_inputs_fn()({"M": 2}, "cpu")["x"].shape == (2, 4)
    # the same problem also loads from the definition file path
    assert load_problem(tmp_path / "definition.json").name == "scale_rows"


@pytest.mark.parametrize(
    "workload,match",
    [
        ({"uuid": "a", "axes": {"M": 5}, "inputs": {"scale": {"type": "scalar", "value": 1.0}}}, r"constraints\[0\]"),
        ({"uuid": "a", "axes": {"M": 4}, "inputs": {"scale": {"type": "scalar", "value": -1.0}}}, r"constraints\[1\]"),
        ({"uuid": "a", "axes": {}, "inputs": {}}, "missing values for var axes"),
        ({"uuid": "a", "axes": {"M": 2, "Q": 1}, "inputs": {}}, "not defined"),
        ({"uuid": "a", "axes": {"M": 2, "N": 5}, "inputs": {}}, "contradicts the const"),
        ({"uuid": "a", "axes": {"M": 2}, "inputs": {"z": {"type": "random"}}}, "not inputs of the definition"),
        ({"uuid": "a", "axes": {"M": 2}, "inputs": {"x": {"type": "scalar", "value": 1}}}, "not a scalar"),
        ({"uuid": "a", "axes": {"M": 10**30}, "inputs": {}}, "axes.M: Input should be less than or equal to"),
        ({"uuid": "a", "axes": {"M": 2**128}, "inputs": {}}, "axes.M: Input should be less than or equal to"),
    ],
)
def test_bad_workloads_name_file_and_field(tmp_path, workload, match):
    write_problem(tmp_path, workloads=[workload])
    with pytest.raises(SolkitError, match=match) as exc:
        load_problem(tmp_path)
    assert "workload.jsonl" in str(exc.value) or "definition.json" in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "over,match",
    [
        ({"reference": "def forward(x, scale):\n    return x\n"}, "reference: must define a top-level function `run`"),
        ({"outputs": {"y": {"shape": ["M", "K"], "dtype": "bfloat16"}}}, r"outputs.y.shape: unknown axis 'K'"),
        ({"axes": {"M": {"type": "var"}, "N": {"type": "weird"}}}, "axes.N"),
    ],
)
def test_bad_definitions(tmp_path, over, match):
    write_problem(tmp_path, definition=over)
    with pytest.raises(SolkitError, match=match) as exc:
        load_problem(tmp_path)
    assert str(exc.value).startswith(str(tmp_path / "definition.json"))


@pytest.mark.parametrize("name", ["definition.json", "workload.jsonl", "reference.py"])
def test_non_utf8_files_are_one_line(tmp_path, name):
    write_problem(tmp_path, definition={"reference": ""} if name == "reference.py" else None)
    (tmp_path / name).write_bytes(b"\xff\xfe{ not utf-8")
    with pytest.raises(SolkitError, match=rf"{name}: not UTF-8 text") as exc:
        load_problem(tmp_path)
    assert "\n" not in str(exc.value)


def test_expression_axis_out_of_range(tmp_path):
    axes = {
        "M": {"type": "var"},
        "N": {"type": "const", "value": 4},
        "H": {"type": "expr", "expression": "M * M"},
        "D": {"type": "expr", "expression": "N // 2"},
    }
    write_problem(
        tmp_path,
        definition={"axes": axes, "outputs": {"y": {"shape": ["M", "H"], "dtype": "bfloat16"}}},
        workloads=[{"uuid": "a", "axes": {"M": 2**30}, "inputs": {"scale": {"type": "scalar", "value": 1.0}}}],
    )
    with pytest.raises(SolkitError, match=r"axis H = M \* M evaluates to .*outside 0..2\*\*40"):
        load_problem(tmp_path)


def test_invalid_json_and_missing_files(tmp_path):
    (tmp_path / "definition.json").write_text("{not json")
    with pytest.raises(SolkitError, match="invalid JSON at line 1"):
        load_problem(tmp_path)
    with pytest.raises(SolkitError, match="no definition.json"):
        load_problem(tmp_path / "sub" if (tmp_path / "sub").mkdir() is None else tmp_path)
    with pytest.raises(SolkitError, match="no such problem"):
        load_problem(tmp_path / "missing")
    write_problem(tmp_path)
    (tmp_path / "workload.jsonl").write_text('{"uuid": "a", "axes": {"M": 2}}\n{"uuid": \n')
    with pytest.raises(SolkitError, match=r"workload.jsonl:2: invalid JSON"):
        load_problem(tmp_path)


def test_circular_expression_axes(tmp_path):
    write_problem(
        tmp_path,
        definition={"axes": {"M": {"type": "var"}, "N": {"type": "expr", "expression": "H + 1"},
                             "H": {"type": "expr", "expression": "N - 1"}, "D": {"type": "const", "value": 1}}},
    )  # fmt: skip
    with pytest.raises(SolkitError, match="circular"):
        load_problem(tmp_path)


def test_solution_sources_beside_json(tmp_path):
    (tmp_path / "kernel.py").write_text("def run(x, scale):\n    return x * scale\n")
    sol = {
        "name": "s",
        "definition": "scale_rows",
        "author": "t",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "kernel.py::run"},
        "sources": [{"path": "kernel.py", "content": ""}],
    }
    (tmp_path / "solution.json").write_text(json.dumps(sol))
    s = load_solution(tmp_path / "solution.json")
    assert "return x * scale" in s.sources[0].content
    (tmp_path / "kernel.py").unlink()
    with pytest.raises(SolkitError, match=r"sources\[0\].content is empty"):
        load_solution(tmp_path / "solution.json")
