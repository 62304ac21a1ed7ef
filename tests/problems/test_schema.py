import json

import pytest
from pydantic import ValidationError

from solkit.problems.schema import (
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    Solution,
    ToleranceSpec,
    Trace,
    Workload,
)

REF = "import torch\n\ndef run(x, w, eps):\n    return x * w\n"


def definition(**over):
    d = {
        "name": "scale",
        "axes": {
            "M": {"type": "var"},
            "N": {"type": "const", "value": 16},
            "H": {"type": "expr", "expression": "N // 2"},
        },
        "inputs": {
            "x": {"shape": ["M", "N"], "dtype": "float32"},
            "w": {"shape": ["N"], "dtype": "float32"},
            "eps": {"shape": None, "dtype": "float32"},
        },
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "float32"}},
        "reference": REF,
    }
    d.update(over)
    return d


def test_definition_accepts_full_document_and_keeps_unknown_keys():
    d = Definition.model_validate(definition(extra_field={"a": 1}, constraints=["N % 2 == 0"]))
    assert d.var_axes == ["M"] and d.const_axes == {"N": 16} and d.expr_axes == {"H": "N // 2"}
    assert d.model_dump()["extra_field"] == {"a": 1}
    assert d.inputs["eps"].shape is None


@pytest.mark.parametrize(
    "over,match",
    [
        ({"reference": "def forward(x, w, eps):\n    pass\n"}, "top-level function `run`"),
        ({"reference": "def run(w, x, eps):\n    pass\n"}, "inputs in order"),
        ({"reference": "def run(x, w):\n    pass\n"}, "inputs in order"),
        ({"reference": "def run(x, w, eps:\n"}, "not valid Python"),
        ({"outputs": {"y": {"shape": ["M", "Q"], "dtype": "float32"}}}, "unknown axis 'Q'"),
        ({"outputs": {"x": {"shape": ["M"], "dtype": "float32"}}}, "also input names"),
        ({"outputs": {"y": {"shape": ["M"], "dtype": "float33"}}}, "dtype"),
        ({"custom_inputs_entrypoint": "gen"}, "custom_inputs_entrypoint"),
        ({"axes": {"M": {"type": "var"}, "N": {"type": "expr", "expression": "M.real"}}}, "attribute .real"),
        ({"constraints": ["Z > 1"]}, "unknown names"),
    ],
)
def test_definition_rejects(over, match):
    with pytest.raises(ValidationError, match=match):
        Definition.model_validate(definition(**over))


def test_digit_literal_shape_and_custom_entrypoint():
    ref = "def gen(axes, device):\n    return {}\n\ndef run(x, w, eps):\n    return x\n"
    d = Definition.model_validate(
        definition(reference=ref, custom_inputs_entrypoint="gen", outputs={"y": {"shape": ["M", "2"], "dtype": "bool"}})
    )
    assert d.outputs["y"].shape == ["M", "2"]


def test_workload_defaults_and_custom_mixing():
    w = Workload.model_validate({"uuid": "u", "axes": {"M": 3}, "inputs": {"x": {"type": "random"}}})
    assert w.tolerance == ToleranceSpec()
    assert w.tolerance.max_atol == 1e-2 and w.tolerance.required_matched_ratio == 0.99
    assert not w.tolerance.explicit_matched_ratio
    w2 = Workload.model_validate({"uuid": "u", "inputs": {}, "tolerance": {"required_matched_ratio": 0.5}})
    assert w2.tolerance.explicit_matched_ratio
    with pytest.raises(ValidationError, match="cannot be mixed"):
        Workload.model_validate(
            {"uuid": "u", "inputs": {"x": {"type": "custom"}, "eps": {"type": "scalar", "value": 1}}}
        )
    with pytest.raises(ValidationError):
        Workload.model_validate({"uuid": "u", "inputs": {"x": {"type": "banana"}}})
    with pytest.raises(ValidationError):
        Workload.model_validate({"uuid": "u", "axes": {"M": -1}})


def solution(**spec_over):
    spec = {"languages": ["triton"], "target_hardware": ["LOCAL"], "entry_point": "k.py::run"}
    spec.update(spec_over)
    return {
        "name": "s",
        "definition": "scale",
        "author": "me",
        "spec": spec,
        "sources": [{"path": "k.py", "content": "x"}],
    }


def test_solution_valid_and_defaults():
    s = Solution.model_validate(solution())
    assert s.spec.destination_passing_style is True and s.spec.entry_symbol == "run"
    assert s.spec.compile_options is None
    fib = solution()
    fib["spec"]["language"] = fib["spec"].pop("languages")[0]  # FlashInfer-Bench spelling
    assert [lang.value for lang in Solution.model_validate(fib).spec.languages] == ["triton"]


@pytest.mark.parametrize(
    "over,match",
    [
        ({"entry_point": "k.py:run"}, "file.py::function"),
        ({"entry_point": "other.py::run"}, "not among sources"),
        ({"languages": ["triton", "cuda_cpp"]}, "cannot mix"),
        ({"languages": ["cuda_cpp"]}, "suffix"),
        ({"languages": ["fortran"]}, "languages"),
    ],
)
def test_solution_rejects(over, match):
    with pytest.raises(ValidationError, match=match):
        Solution.model_validate(solution(**over))


def test_solution_path_traversal_rejected():
    bad = solution()
    bad["sources"] = [{"path": "../k.py", "content": "x"}]
    with pytest.raises(ValidationError, match="relative"):
        Solution.model_validate(bad)


def env():
    return Environment(hardware="cpu", libs={"torch": "x"}, seed=1)


def test_evaluation_status_rules():
    c = Correctness(max_absolute_error=0.1, max_relative_error=0.2)
    p = Performance(latency_ms=1.0, reference_latency_ms=2.0, speedup_factor=2.0, t_sol_ms=0.5)
    Evaluation(status="PASSED", environment=env(), timestamp="t", correctness=c, performance=p)
    Evaluation(status="INCORRECT_NUMERICAL", environment=env(), timestamp="t", correctness=c)
    for status in ("REWARD_HACK", "INVALID_REFERENCE", "COMPILE_ERROR", "TIMEOUT", "RUNTIME_ERROR"):
        Evaluation(status=status, environment=env(), timestamp="t", log="why")
        with pytest.raises(ValidationError):
            Evaluation(status=status, environment=env(), timestamp="t", correctness=c)
    with pytest.raises(ValidationError):
        Evaluation(status="PASSED", environment=env(), timestamp="t", correctness=c)
    with pytest.raises(ValidationError):
        Correctness(max_absolute_error=-1)
    assert {s.value for s in EvaluationStatus} >= {"REWARD_HACK", "INVALID_REFERENCE", "COMPILE_ERROR", "TIMEOUT"}


def test_trace_roundtrip_and_sol_reader_view():
    w = Workload.model_validate({"uuid": "u", "axes": {"M": 3}, "inputs": {}})
    ev = Evaluation(status="TIMEOUT", environment=env(), timestamp="t", log="hung", solkit={"reason": "x"})
    t = Trace(definition="scale", workload=w, solution="s", evaluation=ev)
    text = json.dumps(t.model_dump(mode="json"), allow_nan=False)
    back = Trace.model_validate_json(text)
    assert back == t and not back.passed
    # SOL-ExecBench's reader ignores unknown keys: the documented core fields must all be present.
    data = json.loads(text)
    assert set(data) == {"definition", "workload", "solution", "evaluation"}
    assert {"status", "environment", "timestamp", "log", "correctness", "performance"} <= set(data["evaluation"])
