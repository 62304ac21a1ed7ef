"""A serial suite starts the candidate processes of the next evaluations ahead, in one batch, and every one of them
is ready (idle) before the current candidate's first call; each is adopted only by its own evaluation, and none is
left running after the suite."""

import json
import os
from pathlib import Path

import pytest
from harness_helpers import EXAMPLES, fast_options

from solkit.harness.lookahead import Lookahead, auto_depth
from solkit.harness.spawn import ready


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_batch_started_ready_before_calls_taken_in_order_and_closed():
    gelu, rows = EXAMPLES / "gelu_add", EXAMPLES / "gather_rows"
    items = [(gelu, None), (rows, rows / "solution_pytorch.json"), (gelu, gelu / "solution_pytorch.json")]
    la = Lookahead(items, fast_options(device="cpu", sandbox="off"), depth=2)
    assert la.take(gelu, None) is None  # the first evaluation starts its own
    la.fill()
    assert sorted(la.started) == [1, 2] and la.batches == 1
    la.fill()  # the next one has its candidate already: no second batch
    assert la.batches == 1
    waited = la.settle()
    assert waited >= 0 and all(ready(a.spawned) for a in la.started.values())
    assert all(a.spawned.popen.poll() is None for a in la.started.values())  # ready means idle, not exited
    pids = [a.spawned.popen.pid for a in la.started.values()]
    # an evaluation that never ran (an error before it took its candidate) loses its candidate to the next one's
    third = la.take(gelu, gelu / "solution_pytorch.json")
    assert third is not None and la.started == {} and _gone(pids[0])
    solution = json.loads((gelu / "solution_pytorch.json").read_text())
    assert third.spawned.job["solution"]["name"] == solution["name"] and third.spawned.job["device"] == "cpu"
    assert la.take(rows, rows / "solution_pytorch.json") is None  # behind the current one: not started again
    la.started[9] = third  # close() discards whatever is still waiting
    la.close()
    assert _gone(pids[1]) and not Path(third.work_dir).exists()


@pytest.mark.parametrize("depth", [0, 1])
def test_depth_bounds_the_batch(depth):
    gelu = EXAMPLES / "gelu_add"
    la = Lookahead([(gelu, None)] * 3, fast_options(device="cpu", sandbox="off"), depth=depth)
    assert la.take(gelu, None) is None
    la.fill()
    try:
        assert sorted(la.started) == list(range(1, 1 + depth))
    finally:
        la.close()


@pytest.mark.parametrize(("cores", "depth"), [(2, 0), (6, 0), (8, 2), (11, 3), (16, 4), (128, 4)])
def test_default_depth_takes_the_cores_left(monkeypatch, cores, depth):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert auto_depth() == depth
