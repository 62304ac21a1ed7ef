"""SOL-ExecBench's command line on ``solkit eval`` (solkit.harness.compat) on our own minimal samples.

The samples in tests/harness/compat_samples are written for solkit (no SOL-ExecBench file is copied); each one
carries a fact of a SOL-ExecBench sample: ``paged_gather`` a constraint on an input tensor's values
(``kv_indptr[-1].item()``, as gqa_paged_decode), safetensors inputs, a config.json and a default solution.json;
``vecadd_triton_ref`` a ``@triton.jit`` reference and a solution naming another definition (as triton_ref_vecadd).
"""

import argparse
import json
import shutil
from pathlib import Path

import pytest

from solkit.cli import main
from solkit.errors import SolkitError
from solkit.harness import compat
from solkit.harness.phases import WORKLOAD_PHASES
from solkit.problems.loader import load_problem, solution_from_python
from solkit.problems.schema import Trace

SAMPLES = Path(__file__).parent / "compat_samples"
FAST = ["--device", "cpu", "--cpu-threads", "1", "--cpu-timing-budget", "0.2", "--timing-trials", "1"]


def _paged(tmp_path: Path) -> Path:
    d = tmp_path / "paged_gather"
    shutil.copytree(SAMPLES / "paged_gather", d)
    return d


def test_sol_execbench_argv_explicit_files_config_and_jsonl(tmp_path, capsys):
    d = _paged(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(d / "workload.jsonl", elsewhere / "w.jsonl")
    out = tmp_path / "traces.jsonl"
    argv = [
        "eval",
        "--definition",
        str(d / "definition.json"),
        "--workload",
        str(elsewhere / "w.jsonl"),
        "--solution",
        str(d / "solution.json"),
        "--config",
        str(d / "config.json"),
        "-o",
        str(out),
        "--json",
    ]
    rc = main([*argv, *FAST])  # fmt: skip
    assert rc == 1  # one workload's inputs violate the constraint
    lines = capsys.readouterr().out.splitlines()
    assert lines == out.read_text().splitlines() and len(lines) == 3  # JSONL on stdout, as sol-execbench --json
    traces = {t.workload.uuid: t for t in (Trace.model_validate_json(line) for line in lines)}
    for uuid in ("paged-ok-3", "paged-ok-1"):
        ev = traces[uuid].evaluation
        assert ev.status.value == "PASSED", ev.log
        assert ev.performance.timing["reps"] <= 5  # config.json's iterations
        phases = ev.solkit["phases_s"]
        assert set(WORKLOAD_PHASES) <= set(phases) and phases["run"]["startup"] > 0
    bad = traces["paged-bad-indptr"].evaluation
    assert bad.status.value == "INVALID_REFERENCE" and "kv_indptr[-1].item()" in bad.log


def test_triton_reference_and_a_solution_naming_another_definition(capsys):
    d = SAMPLES / "vecadd_triton_ref"
    assert main(["eval", str(d), "--solution", str(d / "solution_python.json"), *FAST]) == 0
    captured = capsys.readouterr()
    assert "2 PASSED of 2 workloads" in captured.out and "seconds per phase" in captured.out
    assert "names definition 'vecadd'" in captured.err


def test_positional_dir_reads_config_and_solution_json(tmp_path):
    d = _paged(tmp_path)
    args = argparse.Namespace(problem_dir=str(d), definition=None, workload=None, config=None, solution=None,
                              lock_clocks=False, warmup=None, reps=7, seed=None, no_reference_timing=False)  # fmt: skip
    spec = compat.resolve(args)
    assert spec.solution == d / "solution.json" and spec.config == d / "config.json"
    assert spec.workloads == d / "workload.jsonl" and spec.uuids is None
    assert (args.reps, args.warmup, args.seed) == (7, 1, 200)  # the explicit flag wins, config fills, default rest
    args.problem_dir, args.workload = None, ["paged-ok-1", str(d / "workload.jsonl")]
    args.definition = str(d / "definition.json")
    spec = compat.resolve(args)
    assert spec.uuids == ["paged-ok-1"] and spec.solution is None and spec.notes  # the reference, with a note


@pytest.mark.parametrize(
    "config,match",
    [
        ({"lock_clocks": True}, "never changes GPU clocks"),
        ({"iterations": 0}, "iterations must be > 0"),
        ({"warmup_runs": -1}, "warmup_runs must be >= 0"),
        ({"iterations": "5"}, "must be an integer"),
        ({"benchmark_reference": 1}, "true or false"),
        ({"repeats": 3}, "unknown key 'repeats'"),
        ([1], "expected a JSON object"),
    ],
)
def test_bad_config_is_one_line(tmp_path, config, match):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SolkitError, match=match):
        compat.read_config(path)


def test_refused_and_bad_flags_exit_2(tmp_path, capsys):
    d = SAMPLES / "vecadd_triton_ref"
    assert main(["eval", str(d), "--lock-clocks", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--lock-clocks is refused" in err
    assert main(["eval", *FAST]) == 2
    assert "PROBLEM_DIR or --definition" in capsys.readouterr().err
    two = [str(d / "workload.jsonl"), str(d / "workload.jsonl")]
    assert main(["eval", str(d), "--workload", two[0], "--workload", two[1], *FAST]) == 2
    assert "one workload file" in capsys.readouterr().err
    assert main(["eval", str(d), "--solution", str(SAMPLES / "paged_gather" / "solution.json"), *FAST]) == 2
    assert "does not match" in capsys.readouterr().err  # another problem's solution, from outside: refused


@pytest.mark.parametrize(
    "source,dps,language",
    [
        ("import torch\n\ndef run(x, y):\n    return x + y\n", False, "pytorch"),
        ("import torch\n\ndef run(x, y, z):\n    z.copy_(x + y)\n", True, "triton_if_imported"),
        ("SOLKIT_DESTINATION_PASSING = False\n\ndef run(x, y, z=None):\n    return x + y\n", False, "pytorch"),
    ],
)
def test_python_file_as_solution(tmp_path, source, dps, language):
    definition = load_problem(SAMPLES / "vecadd_triton_ref").definition
    if language == "triton_if_imported":
        source, language = "import triton\n" + source, "triton"
    path = tmp_path / "kernel.py"
    path.write_text(source)
    sol = solution_from_python(path, definition)
    assert sol.spec.destination_passing_style is dps and sol.spec.languages[0].value == language
    assert sol.definition == definition.name and sol.spec.entry_point == "kernel.py::run"


@pytest.mark.parametrize(
    "source,match",
    [
        ("def main(x, y):\n    pass\n", "no top-level function 'run'"),
        ("def run(x):\n    pass\n", "run takes 1 parameters"),
        ("def run(x, y:\n", "not valid Python"),
        ("SOLKIT_DESTINATION_PASSING = 1\ndef run(x, y):\n    pass\n", "True or False"),
    ],
)
def test_bad_python_solution_is_one_line(tmp_path, source, match):
    path = tmp_path / "kernel.py"
    path.write_text(source)
    with pytest.raises(SolkitError, match=match):
        solution_from_python(path, load_problem(SAMPLES / "vecadd_triton_ref").definition)


def test_python_solution_carries_local_imports(tmp_path):
    (tmp_path / "helpers.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "kernel.py").write_text("from helpers import add\n\ndef run(x, y):\n    return add(x, y)\n")
    sol = solution_from_python(tmp_path / "kernel.py", load_problem(SAMPLES / "vecadd_triton_ref").definition)
    assert [s.path for s in sol.sources] == ["kernel.py", "helpers.py"]


def test_every_flag_is_documented():
    page = (Path(__file__).parents[2] / "docs" / "sol-execbench.md").read_text()
    for flag, _, _ in compat.FLAGS:
        assert f"`{flag}`" in page, flag
    for key in compat.CONFIG_KEYS:
        assert f"`{key}`" in page, key
