"""The cheating-solution corpus: every case must end in a failing status, correct solutions PASS."""

import json

import pytest
import torch
from harness_helpers import CHEAT_PROBLEM, CHEATS, SMALL_CHEAT_WORKLOADS, fast_options

from solkit.harness.evaluate import evaluate

CASES = sorted(p.parent.name for p in CHEATS.glob("*/solution.json"))


def test_corpus_covers_the_required_cases():
    required = {"lazy_output", "stale_output", "inplace_input", "side_stream", "background_thread",
                "monkey_patched_timer", "zeros", "bf16_compute", "cache_first_result"}  # fmt: skip
    assert required <= set(CASES)
    assert any(json.loads((CHEATS / c / "expect.json").read_text())["statuses"] == ["PASSED"] for c in CASES)


#: Cases that take tens of seconds on a 2-core CPU: in the `slow` set, which CI runs in the time left (.ci/run).
SLOW = {"sleep_forever_at_call"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_cheat_case(case):
    expect = json.loads((CHEATS / case / "expect.json").read_text())
    if expect["gpu_only"] and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # a case that hangs on purpose needs only a short per-workload timeout to prove it ends (expect.json)
    extra = {"run_timeout": expect["run_timeout"]} if "run_timeout" in expect else {}
    opts = fast_options(workloads=SMALL_CHEAT_WORKLOADS, **extra)
    traces = evaluate(CHEAT_PROBLEM, CHEATS / case / "solution.json", opts)
    assert len(traces) == len(SMALL_CHEAT_WORKLOADS)
    for t in traces:
        status = t.evaluation.status.value
        assert status in expect["statuses"], f"{case}: {status}: {t.evaluation.log[:300]}"
        if expect["reason"] and status == expect["statuses"][0]:
            assert any(r in t.evaluation.log for r in expect["reason"].split("|")), t.evaluation.log
        if status != "PASSED":
            assert t.evaluation.log, "a failing trace must say why"
            assert t.evaluation.performance is None


def test_rounding_outliers_on_the_extra_sets_are_counted_not_called_cheating():
    opts = fast_options(workloads=SMALL_CHEAT_WORKLOADS[:1])
    traces = evaluate(CHEAT_PROBLEM, CHEATS / "rounding_outlier_after_trials" / "solution.json", opts)
    assert [t.evaluation.status.value for t in traces] == ["PASSED"], traces[0].evaluation.log
    assert traces[0].evaluation.correctness.extra["recheck_outliers"] >= 1
