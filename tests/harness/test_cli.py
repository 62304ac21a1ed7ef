"""The eval / eval-suite commands, their JSON, files, exit codes, and reader compatibility."""

import json
import shutil
from typing import Any

from harness_helpers import CHEATS, EXAMPLES
from pydantic import BaseModel

from solkit.cli import main
from solkit.problems.schema import Trace

FAST = ["--device", "cpu", "--reps", "3", "--warmup", "1", "--cpu-threads", "1", "--cpu-timing-budget", "0.2"]


class _SolCorrectness(BaseModel):  # the shape of SOL-ExecBench's reader (unknown keys ignored)
    max_relative_error: float
    max_absolute_error: float
    has_nan: bool = False
    has_inf: bool = False
    extra: dict[str, Any] | None = None


class _SolPerformance(BaseModel):
    latency_ms: float
    reference_latency_ms: float
    speedup_factor: float


class _SolEnvironment(BaseModel):
    hardware: str
    libs: dict[str, str]


class _SolEvaluation(BaseModel):
    status: str
    environment: _SolEnvironment
    timestamp: str
    log: str = ""
    correctness: _SolCorrectness | None = None
    performance: _SolPerformance | None = None


class _SolTrace(BaseModel):
    definition: str
    workload: dict[str, Any]
    solution: str | None = None
    evaluation: _SolEvaluation | None = None


def test_eval_json_and_output_file(tmp_path, capsys):
    out = tmp_path / "traces.jsonl"
    d = EXAMPLES / "gather_rows"
    rc = main(["eval", str(d), "--solution", str(d / "solution_pytorch.json"), "--json", "-o", str(out), *FAST])
    assert rc == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # JSONL, as sol-execbench --json
    lines = out.read_text().splitlines()
    assert len(printed) == len(lines) == 2
    for obj, line in zip(printed, lines):
        t = Trace.model_validate_json(line)
        assert t.evaluation.status.value == "PASSED" and obj["evaluation"]["status"] == "PASSED"
        sol_view = _SolTrace.model_validate(obj)  # a SOL-ExecBench-style reader parses solkit traces
        assert sol_view.evaluation.performance.latency_ms > 0
        assert "timing" in obj["evaluation"]["performance"]  # solkit's additions ride along


def test_eval_exit_codes(tmp_path, capsys):
    rc = main(["eval", str(CHEATS / "_problem"), "--solution", str(CHEATS / "zeros" / "solution.json"),
               "--workload", "cheat-rows64-h256", *FAST])  # fmt: skip
    assert rc == 1
    assert "INCORRECT_NUMERICAL" in capsys.readouterr().out
    assert main(["eval", str(tmp_path / "nope"), *FAST]) == 2
    assert "no such problem" in capsys.readouterr().err
    bad = CHEATS / "zeros" / "solution.json"
    assert main(["eval", str(EXAMPLES / "gemm"), "--solution", str(bad), *FAST]) == 2  # wrong definition
    assert "does not match" in capsys.readouterr().err
    assert main(["eval", str(EXAMPLES / "gemm"), "--trials", "1"]) == 2
    assert "at least 3" in capsys.readouterr().err
    assert main(["eval", str(EXAMPLES / "gemm"), "--device", "tpu"]) == 2
    assert "allowed values" in capsys.readouterr().err


def test_eval_suite_resumable_and_keeps_going(tmp_path, capsys):
    root = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "gather_rows", root / "L1" / "gather_rows")
    shutil.copytree(EXAMPLES / "gelu_add", root / "L1" / "gelu_add")
    (root / "L1" / "gelu_add" / "solution_triton.json").unlink()
    broken = root / "L2" / "broken"
    broken.mkdir(parents=True)
    (broken / "definition.json").write_text("{not json")
    out = tmp_path / "traces"
    rc = main(["eval-suite", str(root), "-o", str(out), "--json", "--max-workloads", "1", "--lookahead", "2", *FAST])
    assert rc == 1  # the broken problem
    summary = json.loads(capsys.readouterr().out)
    probs = summary["problems"]
    assert probs["L1/gather_rows"]["all_passed"] and probs["L1/gelu_add"]["by_status"] == {"PASSED": 1}
    assert "invalid JSON" in probs["L2/broken"]["errors"][0]
    assert (out / "L1__gather_rows.traces.jsonl").is_file() and (out / "summary.json").is_file()
    # the second evaluation's candidate was started ahead, during the first (--lookahead), and adopted
    line = json.loads((out / "L1__gelu_add.traces.jsonl").read_text())["evaluation"]["solkit"]["phases_s"]
    assert line["timeline"]["candidate.spawn"] < 0 and "lookahead" in line["run"]
    # where the reference phase and the judge's own work went, kept beside the phases
    assert {"generate", "host_copies", "reference_calls", "save"} <= set(line["reference_parts"])
    assert set(line["judge_parts"]) == {"fill", "requests", "other"} and line["judge_parts"]["requests"] > 0
    # the suite's time: every phase summed, and (wall - timing - reference_timing) per workload
    time_s = summary["time_s"]
    assert time_s["workloads"] == 2 and time_s["evaluations"] == 2
    assert set(time_s["phases_s"]) >= {"startup", "lookahead", "reference", "reference_timing", "correctness",
                                       "timing", "checks"}  # fmt: skip
    assert time_s["phases_s"]["reference_timing"] > 0  # the reference was timed, apart from its preparation
    assert 0 < time_s["overhead_per_workload_wall_s"] < time_s["wall_s"] / 2
    shutil.rmtree(broken)
    rc = main(["eval-suite", str(root), "-o", str(out), "--json", *FAST])
    assert rc == 0
    again = json.loads(capsys.readouterr().out)["problems"]
    assert again["L1/gather_rows"].get("resumed") and again["L1/gelu_add"].get("resumed")
