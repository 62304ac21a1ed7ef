"""`solkit tune` whose every configuration fails prints the errors and exits non-zero."""

from solkit.tune.cli import _print_live


def test_every_config_failing_is_an_error(capsys):
    ev = [{"config": {"BLOCK": b}, "status": "runtime_error", "error": "0 active drivers"} for b in (16, 32)]
    result = {"best": None, "best_ms": None, "evaluations": ev, "statuses": {"runtime_error": 2}}
    assert _print_live(result, as_json=False) == 1
    captured = capsys.readouterr()
    assert "best None" not in captured.out
    assert "every one failed" in captured.err and captured.err.count("0 active drivers") == 1
    assert _print_live(result, as_json=True) == 1


def test_a_best_config_is_success(capsys):
    ev = [{"config": {"BLOCK": 16}, "status": "ok", "time_ms": 1.0}]
    assert _print_live({"best": {"BLOCK": 16}, "best_ms": 1.0, "evaluations": ev}, as_json=False) == 0
