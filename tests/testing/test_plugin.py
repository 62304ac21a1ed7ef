"""The solkit pytest plugin, run inside pytest with ``pytester``: the ``sol`` fixture, floors, violations,
work from a problem's analysis, and the ``--sol-json`` file. CPU only: ceilings are the CPU's calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import triton  # noqa: F401

# Imported here so pytester's in-process runs find them loaded (torch cannot be imported twice).
import solkit.hardware.calibrate  # noqa: F401
import solkit.problems.loader  # noqa: F401
import solkit.sol.analysis  # noqa: F401
import solkit.testing.plugin
import solkit.testing.scoring  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "src" / "solkit" / "problems" / "suite" / "softmax"


def run(pytester: pytest.Pytester, config: pytest.Config, *args: str) -> pytest.RunResult:
    """Run pytest in-process on pytester's files, with the plugin: as this session loaded it (through the
    installed entry point), or by module name where it did not (metadata older than the entry point)."""
    loaded = config.pluginmanager.is_registered(solkit.testing.plugin)
    plugin = [] if loaded else ["-p", "no:solkit", "-p", "solkit.testing.plugin"]
    # The plugin module is already imported here, so pytest cannot assertion-rewrite it: say nothing of that.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning", "-p", "no:cacheprovider", "-q"]
    return pytester.runpytest_inprocess(*plugin, *quiet, *args)


def test_entry_point_declared():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"]["solkit"] == "solkit.testing.plugin"
    assert callable(solkit.testing.plugin.sol)  # the fixture the entry point provides


TESTS = """
import time
import torch

def slow_copy(x):
    time.sleep(0.002)
    return x.clone()

def test_passing_floor(sol):
    x = torch.randn(1024)
    rec = sol(slow_copy, x, bytes=2 * x.numel() * 4, floor=1e-12, timing={"reps": 5, "trials": 1})
    assert rec.passed and 0 < rec.sol_fraction < 1 and not rec.violation
    assert rec.median_ms >= 2.0 and rec.t_sol_ms > 0

def test_failing_floor(sol):
    x = torch.randn(1024)
    sol(slow_copy, x, flops=1e3, bytes=8192, floor=0.8, timing={"reps": 5, "trials": 1})

def test_violation_is_flagged(sol):
    x = torch.randn(16)
    rec = sol(torch.neg, x, bytes=1e15, name="impossible", timing={"reps": 5, "trials": 1})
    assert rec.violation and rec.sol_fraction == 1.0 and rec.raw_fraction > 1
"""


def test_floors_and_json(pytester: pytest.Pytester, pytestconfig: pytest.Config, tmp_path: Path):
    pytester.makepyfile(test_floors=TESTS)
    out = tmp_path / "sol.json"
    result = run(pytester, pytestconfig, f"--sol-json={out}")
    result.assert_outcomes(passed=2, failed=1, warnings=1)
    result.stdout.fnmatch_lines(["*test_failing_floor*SOL fraction * is below the floor 0.8*basis calibrated*"])
    result.stdout.fnmatch_lines(["*solkit sol*", "*impossible*VIOLATION*", f"sol JSON: {out}"])
    doc = json.loads(out.read_text())
    assert doc["versions"]["solkit"] and doc["versions"]["torch"]
    assert doc["device"]["kind"] == "cpu"
    rows = {b["name"]: b for b in doc["benchmarks"]}
    assert set(rows) == {"test_passing_floor", "test_failing_floor", "impossible"}
    passing, failing, impossible = rows["test_passing_floor"], rows["test_failing_floor"], rows["impossible"]
    for row in rows.values():
        assert {"median_ms", "mean_ms", "min_ms", "max_ms", "q1_ms", "q3_ms", "cv"} <= set(row["stats"])
        assert row["basis"].startswith("calibrated") and row["device"]["kind"] == "cpu"
        assert row["t_sol_ms"] > 0 and 0 < row["sol_fraction"] <= 1
    assert passing["passed"] is True and passing["floor"] == 1e-12 and passing["bytes"] == 8192
    assert failing["passed"] is False and failing["flops"] == {"fp32_vector": 1e3}
    assert impossible["violation"] is True and impossible["sol_fraction"] == 1.0 and impossible["floor"] is None
    assert passing["fullname"].endswith("test_floors.py::test_passing_floor")


def test_work_from_a_problem(pytester: pytest.Pytester, pytestconfig: pytest.Config):
    pytester.makepyfile(
        test_problem=f"""
import pytest
import triton  # noqa: F401
import torch

def test_softmax(sol):
    x = torch.randn(16, 128256).to(torch.bfloat16)  # the shape of one of the problem's workloads
    rec = sol(lambda t: torch.softmax(t, dim=-1), x, problem={str(SOFTMAX)!r}, timing={{"reps": 3, "trials": 1}})
    assert rec.work_source.startswith("problem softmax workload ")
    assert rec.bytes >= 2 * x.numel() * 2  # bf16 in and out
    assert sum(rec.flops.values()) > 0 and 0 < rec.sol_fraction <= 1

def test_no_matching_workload(sol):
    with pytest.raises(Exception, match="workloads match the argument shapes"):
        sol(torch.neg, torch.randn(3, 5), problem={str(SOFTMAX)!r})

def test_problem_and_counts_exclusive(sol):
    with pytest.raises(Exception, match="not both"):
        sol(torch.neg, torch.randn(3), problem={str(SOFTMAX)!r}, bytes=1)
"""
    )
    run(pytester, pytestconfig).assert_outcomes(passed=3)


def test_no_json_without_the_option(pytester: pytest.Pytester, pytestconfig: pytest.Config):
    pytester.makepyfile(test_plain="def test_nothing():\n    assert True\n")
    result = run(pytester, pytestconfig)
    result.assert_outcomes(passed=1)
    assert "solkit sol" not in result.stdout.str()


@pytest.mark.gpu
def test_gpu_copy(pytester: pytest.Pytester, pytestconfig: pytest.Config):
    pytester.makepyfile(
        test_copy="""
import torch

def test_copy(sol):
    x = torch.randn(16 * 2**20, device="cuda")  # 64 MiB, well past the L2
    y = torch.empty_like(x)
    rec = sol(y.copy_, x, bytes=2 * x.numel() * 4, floor=0.05)
    assert not rec.violation and rec.stats["method"].startswith("cuda")
    assert rec.device["kind"] == "cuda" and rec.basis.split()[0] in ("spec", "calibrated")
"""
    )
    run(pytester, pytestconfig).assert_outcomes(passed=1)
