"""The C++ build path (torch.utils.cpp_extension): slow (a torch extension takes ~1-2 min to compile),
so it runs only with SOLKIT_SLOW_TESTS=1."""

import os

import pytest
from harness_helpers import CHEAT_PROBLEM, HERE, fast_options

from solkit.harness.evaluate import evaluate

pytestmark = pytest.mark.skipif(not os.environ.get("SOLKIT_SLOW_TESTS"), reason="set SOLKIT_SLOW_TESTS=1 (builds C++)")


def test_cpp_solution_builds_and_passes():
    traces = evaluate(CHEAT_PROBLEM, HERE / "cpp_solution" / "solution.json",
                      fast_options(workloads=["cheat-rows64-h256"], compile_timeout=900))  # fmt: skip
    assert [t.evaluation.status.value for t in traces] == ["PASSED"], traces[0].evaluation.log[-2000:]
