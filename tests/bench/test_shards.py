"""bench's pooled items load each problem once per worker process, as a serial run loads it once for all its
workloads (a directory or a Ray bundle alike)."""

from __future__ import annotations

import pytest

from solkit.bench.runner import SUITE_ROOT
from solkit.bench.shards import _PROBLEMS, problem_once
from solkit.scale import pack


@pytest.fixture(autouse=True)
def fresh_cache():
    _PROBLEMS.clear()
    yield
    _PROBLEMS.clear()


@pytest.mark.parametrize("name", ["rmsnorm", "rope_bwd"])
def test_problem_loaded_once_per_directory_and_bundle(name, monkeypatch):
    import solkit.problems.loader as loader

    calls = []
    real = loader.load_problem
    monkeypatch.setattr(loader, "load_problem", lambda d: calls.append(d) or real(d))
    d = SUITE_ROOT / name
    first = problem_once(str(d))
    assert problem_once(d) is first and problem_once(str(d / ".")) is first  # one directory, however named
    bundle = pack(d)
    from_bundle = problem_once(bundle)
    assert problem_once(pack(d)) is from_bundle and from_bundle is not first  # a bundle is keyed by its content
    assert len(calls) == 2 and from_bundle.definition.name == first.definition.name == name
    other = problem_once(SUITE_ROOT / "softmax")
    assert other is not first and other.definition.name == "softmax" and len(calls) == 3
