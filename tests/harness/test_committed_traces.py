"""The GPU traces committed under benchmarks/results/ parse with the Trace schema (the format others read)."""

import json
from pathlib import Path

import pytest

from solkit.problems.schema import Trace

TRACES = sorted(
    (Path(__file__).parents[2] / "benchmarks" / "results" / "harness" / "2026-11-30_h200_traces").glob("*.jsonl")
)


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_committed_gpu_traces_validate(path):
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert lines
    for obj in lines:
        t = Trace.model_validate(obj)
        assert t.evaluation.status.value == "PASSED"
        assert t.evaluation.environment.hardware.startswith("NVIDIA H200")


def test_there_are_committed_traces():
    assert len(TRACES) >= 10
