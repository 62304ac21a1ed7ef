"""The judge's clock checks on an oversubscribed CPU (issue 20): an honest tiny workload is not called a reward
hack because other processes stretch the judge's wall clock. (A child process writing after the call returned is
REWARD_HACK whatever the load: tests/harness/cheats/subprocess_late_write expects nothing else.)"""

import multiprocessing
import os

import pytest
from harness_helpers import EXAMPLES, fast_options

from solkit.harness.evaluate import evaluate


def _spin() -> None:
    while True:
        pass


@pytest.fixture
def loaded_cpu():
    """Three busy processes per core for the duration of the test (a load average of 3-4 per core)."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_spin, daemon=True) for _ in range(3 * (os.cpu_count() or 1))]
    for p in procs:
        p.start()
    try:
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join()


@pytest.mark.slow  # tens of seconds on a loaded 2-core machine: in the set CI runs last (.ci/run)
def test_honest_tiny_workload_passes_under_load(loaded_cpu):
    d = EXAMPLES / "gelu_add"
    traces = evaluate(d, d / "solution_pytorch.json", fast_options(workloads=["gelu-n3"]))
    e = traces[0].evaluation
    assert e.status.value == "PASSED", e.log
