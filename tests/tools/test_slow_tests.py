"""tools/slow_tests.py: the tests that join the `slow` set by their measured time, and the root conftest's marking."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("slow_tests", ROOT / "tools" / "slow_tests.py")
slow_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slow_tests)

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.sol.test_model" name="test_a[x-1]" time="9.5"/>
<testcase classname="tests.sol.test_model" name="test_b" time="0.2"/>
<testcase classname="tests.harness.test_cheats" name="test_cheat_case[zeros]" time="30.0"/>
<testcase classname="tests.no_such_file" name="test_c" time="50.0"/>
</testsuite></testsuites>"""


@pytest.mark.parametrize(("threshold", "listed"), [(4.0, ["tests/sol/test_model.py::test_a[x-1]"]), (10.0, [])])
def test_the_list_holds_the_slow_tests_ci_may_skip(tmp_path, monkeypatch, threshold, listed):
    (tmp_path / "run.xml").write_text(JUNIT)
    monkeypatch.setattr(slow_tests, "OUT", tmp_path / "slow_tests.txt")
    assert slow_tests.main([str(tmp_path / "run.xml"), "--threshold", str(threshold)]) == 0
    lines = [ln for ln in (tmp_path / "slow_tests.txt").read_text().splitlines() if not ln.startswith("#")]
    assert [ln.split(None, 1)[1] for ln in lines] == listed  # the attack corpus is kept; unknown files are dropped


def test_every_listed_test_still_exists_and_is_marked_slow(request):
    listed = [ln.split(None, 1)[1] for ln in (ROOT / "tests" / "slow_tests.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]  # fmt: skip
    assert listed
    for nid in listed:
        assert (ROOT / nid.split("::")[0]).is_file(), nid
    mine = [item for item in request.session.items if item.nodeid in set(listed)]
    assert all(item.get_closest_marker("slow") for item in mine)
