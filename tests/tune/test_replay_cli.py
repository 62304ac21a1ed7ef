import json
from pathlib import Path

import pytest

from solkit.cli import main
from solkit.tune.replay import Landscape, load_landscapes, replay, replay_one

DATA = Path(__file__).parent / "data"


def test_fixture_loads_with_prefilter_and_failures():
    lands = load_landscapes([DATA])
    assert len(lands) == 3
    for land in lands:
        assert 0 < len(land.space) < len(land.space.product())  # the smem pre-filter removed configs
        assert land.best_ms == min(land.time(c) for c in land.space.configs if land.time(c) is not None)
        assert any(t is None for t in land.times.values())


def test_exhaustive_and_full_random_reach_the_best():
    land = load_landscapes([DATA / "synthetic_0.jsonl"])[0]
    n = len(land.space)
    assert replay_one(land, "exhaustive", n, 0)[-1] == 1.0
    assert replay_one(land, "random", n, 3)[-1] == 1.0
    curve = replay_one(land, "random", 40, 3)
    assert all(b >= a for a, b in zip(curve, curve[1:]))  # best-so-far never gets worse


def test_replay_summary_shapes_and_bounds():
    res = replay(load_landscapes([DATA]), "guided", 20, seeds=4, bootstrap=50)
    s = res["summary"]
    assert len(s["geomean"]) == 20
    for k in ("geomean", "p10", "ci95_lo", "ci95_hi"):
        assert all(0.0 <= v <= 1.0 for v in s[k])
    assert all(lo <= g + 1e-9 and g <= hi + 1e-9 for lo, g, hi in zip(s["ci95_lo"], s["geomean"], s["ci95_hi"]))


def test_partial_sweep_only_replays_recorded_configs(tmp_path):
    lines = (DATA / "synthetic_1.jsonl").read_text().splitlines()
    (tmp_path / "cut.jsonl").write_text("\n".join(lines[:120]) + "\n")
    land = Landscape.from_jsonl(tmp_path / "cut.jsonl")
    assert len(land.space) <= 119
    assert replay_one(land, "exhaustive", len(land.space), 0)[-1] == 1.0


def test_cli_replay_json(capsys):
    assert (
        main(["tune", "--replay", str(DATA), "--strategy", "bandit", "--budget", "12", "--seeds", "3", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"] == "bandit" and out["budget"] == 12
    assert set(out["tasks_at_budget"]) == {"synthetic_0", "synthetic_1", "synthetic_2"}
    assert 0 < out["at_budget"]["geomean"] <= 1


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["tune", "--replay", "/no/such/dir"], "does not exist"),
        (["tune", "--replay", str(DATA), "--strategy", "nope"], "unknown strategy"),
        (["tune", "--replay", str(DATA), "--budget", "0"], "--budget"),
        (["tune"], "PROBLEM_DIR"),
    ],
)
def test_cli_errors_are_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_cli_cache_export_import(tmp_path, capsys):
    assert main(["tune", "--cache-dir", str(tmp_path / "c"), "--cache-export", str(tmp_path / "e.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported_entries"] == 0
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert main(["tune", "--cache-dir", str(tmp_path / "c"), "--cache-import", str(bad)]) == 2


RECORDED = Path(__file__).parents[2] / "benchmarks" / "results" / "tuner" / "2026-11-30_h200_sweeps"


@pytest.mark.skipif(not RECORDED.is_dir(), reason="no recorded sweeps in this checkout")
def test_recorded_h200_sweeps_replay_to_the_targets():
    """CI replays the committed GPU sweeps: the default strategy and the bandit, a few seeds."""
    lands = load_landscapes([RECORDED])
    assert len(lands) >= 10
    guided = replay(lands, "guided", 30, seeds=4, bootstrap=20)["summary"]
    rnd = replay(lands, "random", 30, seeds=4, bootstrap=20)["summary"]
    bandit = replay(lands, "bandit", 30, seeds=4, bootstrap=20)["summary"]
    assert guided["geomean"][29] >= 0.95 and guided["p10"][29] >= 0.90
    assert bandit["geomean"][29] > rnd["geomean"][29]


def test_cli_replay_time_budget(capsys):
    argv = ["tune", "--replay", str(DATA), "--strategy", "random", "--time-budget", "4", "--seeds", "2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seconds"] == 4.0
    # synthetic costs are 0.4 s of benchmark per config and no compile: ~10 evaluations fit in 4 s
    assert all(8 <= t["mean_evaluations"] <= 26 for t in out["tasks"].values())
    assert main(["tune", "--replay", str(DATA), "--time-budget", "0"]) == 2
