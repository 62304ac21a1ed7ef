"""benchmarks/run.py end to end on the CPU (Triton's interpreter, the plans' small shapes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "run.py"
H = "topic: x\ndescription: y\n"  # the required fields of a plan
PLANS = sorted((ROOT / "benchmarks" / "plans").glob("*.yaml"))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, env=env, timeout=600)


def test_plan_end_to_end_on_tiny_shapes(tmp_path):
    out = tmp_path / "norms.json"
    res = run(str(ROOT / "benchmarks" / "plans" / "norms.yaml"), "--size", "s", "--impls", "solkit,torch,liger,copy",
              "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    for key in ("date", "device", "versions", "command", "plan", "commit", "timing", "rows"):
        assert key in doc, key
    for key in ("torch", "triton", "liger_kernel"):
        assert key in doc["versions"]
    assert doc["device"]["kind"] == "cpu" and "driver" in doc["device"]
    assert doc["plan"]["topic"] == "norms" and doc["plan"]["size"] == "s"
    assert doc["timing"]["harness"] == "solkit.timing.benchmark"
    ops = {(r["op"], r["direction"]) for r in doc["rows"]}
    assert ("rmsnorm", "fwd_bwd") in ops and ("layernorm", "fwd") in ops
    for row in doc["rows"]:
        by = {r["impl"]: r for r in row["results"]}
        assert by["solkit"]["status"] == "ok", by["solkit"]
        assert by["solkit"]["max_rel_err"] <= by["solkit"]["tol"]
        assert by["solkit"]["median_ms"] > 0 and "iqr_ms" in by["solkit"]
        assert by["copy"]["status"] == "ok"
        assert by["liger"]["status"] == "skipped" and by["liger"]["reason"]


@pytest.mark.parametrize(
    "text, field",
    [
        (H + "cases:\n  - op: nosuchop\n    shapes: [[4, 4]]\n", "cases[0].op"),
        (H + "cases:\n  - op: rmsnorm\n    shapes: [[4, 4]]\n    impls: [tvm]\n", "cases[0].impls"),
        (H + "cases:\n  - op: rmsnorm\n    shape: [[4, 4]]\n", "cases[0].shape"),
        (H + "colour: red\ncases: []\n", "colour"),
        ("topic: x\ncases:\n  - op: rmsnorm\n    shapes: [[4, 4]]\n", "description"),
        (H + "cases:\n  - op: gemm\n    shapes: [[4, 4]]\n", "cases[0].shapes"),
        (H + "cases:\n  - op: gemm\n    shapes: [[4, 4, 4]]\n    directions: [fwd_bwd]\n",
         "cases[0].directions"),
        ("topic: [x\n", "line"),
    ],
)  # fmt: skip
def test_malformed_plan_exits_2_with_one_line(tmp_path, text, field):
    plan = tmp_path / "bad.yaml"
    plan.write_text(text)
    res = run(str(plan), "--out", str(tmp_path / "never.json"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(plan) in lines[0] and field in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "never.json").exists()


def test_every_committed_plan_validates():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from suite.plan import load

        for path in PLANS:
            plan = load(path)
            assert plan.cases(small=True, cpu=True), path
            assert plan.cases(small=False, cpu=False), path
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
