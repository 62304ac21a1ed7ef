"""The phases of an evaluation's time: the reference's own timing is timed work, counted with ``timing``."""

from types import SimpleNamespace

import pytest

from solkit.harness.phases import PHASE_PARTS, TIMED_PHASES, WORKLOAD_PHASES, phase_record, suite_time

RUN = {"launch": 0.5, "load": 0.1, "judge": 1.0, "startup": 0.4, "lookahead": 0.0, "compile": 0.0}
OWN = {"reference": 1.0, "reference_timing": 3.0, "correctness": 0.5, "timing": 4.0, "checks": 0.25}


def test_reference_timing_is_a_phase_of_its_own_and_timed_work():
    assert "reference_timing" in WORKLOAD_PHASES and set(TIMED_PHASES) == {"timing", "reference_timing"}
    rec = phase_record(RUN, OWN, n_workloads=2)
    assert rec["reference_timing"] == 3.0 and rec["reference"] == 1.0
    # the one-off phases shared by 2 workloads, then the workload's own phases but the two timed ones
    assert rec["overhead_per_workload"] == pytest.approx(2.0 / 2 + 1.0 + 0.5 + 0.25)


def test_phase_record_without_reference_timing():  # --no-reference-timing: no such phase, nothing subtracted
    own = {k: v for k, v in OWN.items() if k != "reference_timing"}
    rec = phase_record(RUN, {**own, "reference_timing": None}, n_workloads=1)
    assert "reference_timing" not in rec and rec["overhead_per_workload"] == pytest.approx(2.0 + 1.75)


@pytest.mark.parametrize("parts", [{"reference_parts": {"generate": 0.2, "save": 0.7}},
                                   {"judge_parts": {"fill": 0.1, "requests": 0.3, "other": 0.05}},
                                   {"reference_parts": "not a dict"}])  # fmt: skip
def test_phase_breakdowns_are_kept_beside_and_not_added(parts):
    rec = phase_record(RUN, {**OWN, **parts}, n_workloads=2)
    assert set(PHASE_PARTS) == {"reference_parts", "judge_parts"}
    for k, v in parts.items():
        assert rec.get(k) == (v if isinstance(v, dict) else None)
    assert rec["overhead_per_workload"] == pytest.approx(phase_record(RUN, OWN, n_workloads=2)["overhead_per_workload"])


def _trace(solution: str, own: dict, timeline: dict) -> SimpleNamespace:
    rec = {**phase_record(RUN, own, 2), "timeline": timeline}
    return SimpleNamespace(definition="p", solution=solution, evaluation=SimpleNamespace(solkit={"phases_s": rec}))


def test_suite_time_subtracts_every_timed_phase_from_the_wall_clock():
    a = {"judged": 5.0}
    traces = [_trace("s1", OWN, a), _trace("s1", OWN, a), _trace("s2", OWN, {"judged": 6.0})]
    t = suite_time(traces, wall_s=30.0)
    assert t["workloads"] == 3 and t["evaluations"] == 2
    assert t["phases_s"]["reference_timing"] == 9.0 and t["phases_s"]["timing"] == 12.0
    assert t["phases_s"]["judge"] == 2.0  # each evaluation's one-off phases once
    assert t["overhead_per_workload_wall_s"] == pytest.approx((30.0 - 12.0 - 9.0) / 3)


def test_timing_is_the_candidates_time_command_alone():
    from harness_helpers import EXAMPLES, fast_options

    from solkit.harness.evaluate import evaluate

    d = EXAMPLES / "gather_rows"
    trace = evaluate(d, d / "solution_pytorch.json", fast_options(device="cpu", max_workloads=1))[0]
    phases = trace.evaluation.solkit["phases_s"]
    wall_ms = trace.evaluation.correctness.extra["judge_clock"]["timing_wall_ms"]
    assert trace.evaluation.status.value == "PASSED"
    assert phases["timing"] == pytest.approx(wall_ms / 1e3, abs=1e-3) and phases["checks"] > 0
    assert phases["reference_timing"] > 0
