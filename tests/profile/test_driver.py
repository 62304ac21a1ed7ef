"""Driver pieces that run without a GPU: grouping, and merging interleaved trials and telemetry."""

from __future__ import annotations

import pytest

from solkit.profile.driver import _groups, combine_telemetry, combine_trials


def test_groups_keep_a_problem_and_workload_together():
    specs = [
        {"label": "a.ref", "problem_dir": "a", "workload": "w1"},
        {"label": "a.sol", "problem_dir": "a", "workload": "w1"},
        {"label": "b.ref", "problem_dir": "b", "workload": None},
        {"label": "a.ref2", "problem_dir": "a", "workload": "w2"},
    ]
    assert [[t["label"] for t in g] for g in _groups(specs)] == [["a.ref", "a.sol"], ["b.ref"], ["a.ref2"]]


def _trial(median, lo, hi, method="graph"):
    return {
        "median_ms": median,
        "mean_ms": median,
        "min_ms": lo,
        "max_ms": hi,
        "q1_ms": lo,
        "q3_ms": hi,
        "iqr_ms": hi - lo,
        "cv": 0.01,
        "method": method,
        "reps": 30,
        "trials": 1,
        "l2_flushed": True,
        "rotating_buffers": 1,
        "high_variance": False,
        "trial_medians_ms": [median],
    }


def test_combine_trials_median_of_medians():
    out = combine_trials([_trial(1.0, 0.9, 1.2), _trial(1.2, 1.1, 1.5), _trial(1.1, 1.0, 1.3)])
    assert out["median_ms"] == pytest.approx(1.1)
    assert out["min_ms"] == 0.9 and out["max_ms"] == 1.5 and out["trials"] == 3 and out["reps"] == 90
    assert out["trial_medians_ms"] == [1.0, 1.2, 1.1] and out["interleaved"]
    assert out["high_variance"]  # 7 % between trials
    assert combine_trials([_trial(1.0, 0.9, 1.1)])["median_ms"] == 1.0


def _tele(median, lo, pmax, mask, frac, n=10):
    return {
        "available": True,
        "source": "nvml",
        "n_samples": n,
        "duration_s": 0.5,
        "sm_clock_mhz": {"median": median, "min": lo, "max": 1980},
        "mem_clock_mhz": {"median": 3201, "min": 3201, "max": 3201},
        "power_w": {"max": pmax, "median": pmax - 50},
        "temperature_c": {"max": 60, "min": 40},
        "throttle_reasons_mask": mask,
        "throttled": bool(mask & 4),
        "throttled_fraction": frac,
    }


def test_combine_telemetry_worst_case():
    out = combine_telemetry([_tele(1980, 1950, 400, 0, 0.0), _tele(1600, 1500, 699, 4, 1.0)])
    assert out["throttled"] and out["throttle_reasons"] == ["sw_power_cap"]
    assert out["sm_clock_mhz"]["min"] == 1500 and out["power_w"]["max"] == 699
    assert out["throttled_fraction"] == pytest.approx(0.5) and out["n_samples"] == 20 and out["windows"] == 2
    assert "throttled" in out["warning"].lower()
    cold = combine_telemetry([_tele(1980, 1950, 400, 0, 0.0), _tele(1980, 1950, 420, 1, 0.0)])
    assert not cold["throttled"] and cold["warning"] is None
    assert combine_telemetry([{"available": False, "reason": "no NVML"}])["available"] is False


def test_time_group_interleaves_abba_and_isolates_failures(monkeypatch):
    """The GPU branch of the timing loop, with the timer, sampler and kernel list faked."""
    import solkit.hardware.telemetry as telemetry
    import solkit.timing as timing
    from solkit.profile import driver

    calls = []

    class T:
        def __init__(self, label):
            self.label, self.args = label, ()

        def fn(self):
            pass

    class FakeResult:
        def __init__(self, label):
            self.label = label

        def to_dict(self):
            n = len(calls)
            return _trial(1.0 + 0.01 * n, 0.9, 1.3)

    def fake_benchmark(fn, pool, **kw):
        label = fn.__self__.label
        calls.append((label, kw["warmup"]))
        if label == "bad" and len([c for c in calls if c[0] == "bad"]) == 2:
            raise RuntimeError("kernel crashed on trial 2")
        return FakeResult(label)

    class FakeSampler:
        def __init__(self, device_index=0):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def summary(self):
            return _tele(1980, 1950, 300, 0, 0.0)

    monkeypatch.setattr(timing, "benchmark", fake_benchmark)
    monkeypatch.setattr(telemetry, "TelemetrySampler", FakeSampler)
    monkeypatch.setattr(driver, "_kernel_list", lambda target, device, calls=3: [{"name": "k", "count_per_call": 1}])
    out = driver._time_group([T("ref"), T("sol"), T("bad")], "cuda")
    order = [c[0] for c in calls]
    assert order[:3] == ["ref", "sol", "bad"] and order[3:5] == ["bad", "sol"]  # A B C, then C B A ...
    assert [w for _, w in calls[:3]] == [3, 3, 3] and all(w == 1 for _, w in calls[3:])
    assert out["bad"] == {"error": "RuntimeError: kernel crashed on trial 2"}
    assert order.count("bad") == 2  # never timed again after failing
    for label in ("ref", "sol"):
        assert out[label]["timing"]["trials"] == driver.TRIALS and out[label]["timing"]["interleaved"]
        assert out[label]["telemetry"]["windows"] == driver.TRIALS
        assert out[label]["kernels"]
