"""Failure modes: every failure becomes a trace with the right status; the harness survives."""

import json

import pytest
from harness_helpers import CHEAT_PROBLEM, SMALL_CHEAT_WORKLOADS, fast_options

from solkit.harness.evaluate import evaluate

GOOD = (
    "import torch\n\ndef run(x, weight):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight\n"
)


def write_solution(tmp_path, code, lang="pytorch", entry="kernel.py", dps=False, extra_sources=()):
    sources = [{"path": entry, "content": code}, *extra_sources]
    sol = {"name": f"s_{tmp_path.name}", "definition": "rmsnorm_fp32_cheats", "author": "t",
           "spec": {"languages": [lang], "target_hardware": ["LOCAL"], "entry_point": f"{entry}::run",
                    "destination_passing_style": dps}, "sources": sources}  # fmt: skip
    path = tmp_path / "solution.json"
    path.write_text(json.dumps(sol))
    return path


def statuses(tmp_path, code, **kw):
    opts = fast_options(workloads=SMALL_CHEAT_WORKLOADS, **kw.pop("opts", {}))
    traces = evaluate(CHEAT_PROBLEM, write_solution(tmp_path, code, **kw), opts)
    return [t.evaluation.status.value for t in traces], traces


def test_crash_on_one_workload_keeps_the_others(tmp_path):
    code = GOOD + (
        "\n_run = run\n\ndef run(x, weight):\n    import os\n    if x.shape[1] == 1000:\n"
        "        os._exit(3)\n    return _run(x, weight)\n"
    )
    got, traces = statuses(tmp_path, code)
    assert got == ["PASSED", "RUNTIME_ERROR"]
    assert "died" in traces[1].evaluation.log


def test_hang_is_a_timeout_and_the_next_workload_still_runs(tmp_path):
    code = GOOD + (
        "\n_run = run\n\ndef run(x, weight):\n    import time\n    while x.shape[0] == 64:\n"
        "        time.sleep(0.1)\n    return _run(x, weight)\n"
    )
    got, traces = statuses(tmp_path, code, opts={"run_timeout": 4})
    assert got == ["TIMEOUT", "PASSED"]
    assert "timed out" in traces[0].evaluation.log


def test_compile_errors(tmp_path):
    got, traces = statuses(tmp_path, "def run(x, weight:\n    pass\n")
    assert got == ["COMPILE_ERROR"] * 2 and "SyntaxError" in traces[0].evaluation.log
    got, _ = statuses(tmp_path, "import no_such_module_xyz\n\ndef run(x, weight):\n    return x\n")
    assert got == ["COMPILE_ERROR"] * 2
    got, _ = statuses(tmp_path, "x = 1\n")
    assert got == ["COMPILE_ERROR"] * 2  # no callable run


def test_import_hang_is_a_compile_timeout(tmp_path):
    got, traces = statuses(tmp_path, "import time\nwhile True:\n    time.sleep(0.1)\n", opts={"compile_timeout": 3})
    assert got == ["TIMEOUT"] * 2 and "compile phase timed out" in traces[0].evaluation.log


def test_runtime_error_and_wrong_structure(tmp_path):
    got, traces = statuses(tmp_path, "def run(x, weight):\n    raise ValueError('boom')\n")
    assert got == ["RUNTIME_ERROR"] * 2 and "boom" in traces[0].evaluation.log
    got, _ = statuses(tmp_path, "def run(x, weight):\n    return x[:, :3].clone()\n")
    assert got == ["INCORRECT_SHAPE"] * 2
    got, _ = statuses(tmp_path, "def run(x, weight):\n    return (x * 1.0).double()\n")
    assert got == ["INCORRECT_DTYPE"] * 2
    got, _ = statuses(tmp_path, "def run(x, weight):\n    return None\n")
    assert got == ["INCORRECT_SHAPE"] * 2


def test_input_modification_is_reported(tmp_path):
    code = GOOD + "\n_run = run\n\ndef run(x, weight):\n    y = _run(x, weight)\n    weight.zero_()\n    return y\n"
    got, traces = statuses(tmp_path, code)
    assert got == ["INCORRECT_NUMERICAL"] * 2 and "was modified" in traces[0].evaluation.log
    assert traces[0].evaluation.correctness is not None


def test_cuda_cpp_without_gpu_or_nvcc_is_a_clear_compile_error(tmp_path):
    code = "#include <torch/extension.h>\ntorch::Tensor run(torch::Tensor x, torch::Tensor w) { return x; }\n"
    got, traces = statuses(tmp_path, code, lang="cuda_cpp", entry="main.cu")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine can build CUDA C++")
    assert got == ["COMPILE_ERROR"] * 2
    assert "nvcc" in traces[0].evaluation.log or "CUDA device" in traces[0].evaluation.log


def test_other_language_reported_unsupported_when_its_package_is_missing(tmp_path):
    code = "import cutlass_dsl_missing_pkg\n\ndef run(x, weight):\n    return x\n"
    got, traces = statuses(tmp_path, code, lang="cute_dsl")
    log = traces[0].evaluation.log
    assert got == ["COMPILE_ERROR"] * 2 and "nvidia-cutlass-dsl" in log and "pip install" in log and "\n" not in log


def test_invalid_reference(tmp_path):
    d = json.loads((CHEAT_PROBLEM / "definition.json").read_text())
    d["reference"] = (
        "import torch\n\ndef run(x, weight):\n    if x.shape[0] == 33:\n"
        "        raise RuntimeError('ref broke')\n    return x * weight\n"
    )
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "definition.json").write_text(json.dumps(d))
    (tmp_path / "p" / "workload.jsonl").write_text((CHEAT_PROBLEM / "workload.jsonl").read_text())
    traces = evaluate(tmp_path / "p", None, fast_options(workloads=SMALL_CHEAT_WORKLOADS))
    assert [t.evaluation.status.value for t in traces] == ["PASSED", "INVALID_REFERENCE"]
    assert "ref broke" in traces[1].evaluation.log


def test_spawned_worker_without_fork_server(tmp_path):
    code = GOOD + (
        "\n_run = run\n\ndef run(x, weight):\n    import os\n    if x.shape[1] == 1000:\n"
        "        os._exit(3)\n    return _run(x, weight)\n"
    )
    got, traces = statuses(tmp_path, code, opts={"use_fork_server": False})
    assert got == ["PASSED", "RUNTIME_ERROR"]
    assert "exit code 3" in traces[1].evaluation.log  # a spawned worker is our child: its exit code is known
