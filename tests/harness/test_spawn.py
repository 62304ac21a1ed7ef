"""A candidate process started ahead is adopted only for exactly the job, containment and environment it started
with; otherwise it is killed and the judge starts its own."""

import os
from pathlib import Path

import pytest

from solkit.harness.evaluate import reference_solution
from solkit.harness.spawn import adoptable, candidate_job, spawn_candidate
from solkit.problems.loader import load_problem

EXAMPLE = Path(__file__).parent / "examples" / "gelu_add"


@pytest.fixture
def ahead(tmp_path):
    solution = reference_solution(load_problem(EXAMPLE)).model_dump(mode="json")
    plan = {"enabled": False}
    cjob, scratch = candidate_job({"solution": solution, "device": "cpu", "sandbox_plan": plan}, tmp_path, 1)
    spawned = spawn_candidate(cjob, scratch, plan)
    yield spawned, cjob, scratch, plan
    spawned.discard()


def test_adopted_only_for_the_same_job_plan_and_environment(ahead, monkeypatch):
    spawned, cjob, scratch, plan = ahead
    assert adoptable(spawned, cjob, scratch, plan)
    assert not adoptable(spawned, {**cjob, "device": "cuda:0"}, scratch, plan)
    assert not adoptable(spawned, {**cjob, "cpu_threads": 3}, scratch, plan)
    assert not adoptable(spawned, cjob, scratch, {"enabled": True, "namespaces": True})
    assert not adoptable(spawned, cjob, scratch.parent / "candidate2", plan)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "solkit-test")  # changed after the process started
    assert not adoptable(spawned, cjob, scratch, plan)


def test_discarded_process_is_gone(ahead):
    spawned, cjob, scratch, plan = ahead
    pid = spawned.popen.pid
    spawned.discard()
    spawned.discard()  # twice is harmless: its pipe is closed once
    assert spawned.popen.poll() is not None
    assert not adoptable(spawned, cjob, scratch, plan)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
