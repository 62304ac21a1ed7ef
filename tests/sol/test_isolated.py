"""The analysis of an untrusted reference runs in a child with a deadline (issue: hostile references)."""

import json
import shutil
from pathlib import Path

import pytest

from solkit.errors import SolkitError
from solkit.sol.isolated import analyze_problem_isolated

EXAMPLE = Path(__file__).resolve().parents[1] / "harness" / "examples" / "gather_rows"

PREFIX = {
    "exit": ("import os\nos._exit(3)\n", r"ended the analysis process \(exit code 3\)"),
    "raise": ("raise RuntimeError('boom at import')\n", r"failed during analysis: RuntimeError: boom at import"),
    "hang": ("import time\nwhile True:\n    time.sleep(1)\n", r"did not finish within 4 s \(killed\)"),
}


def _hostile(tmp_path, kind):
    root = tmp_path / kind
    shutil.copytree(EXAMPLE, root)
    d = json.loads((root / "definition.json").read_text())
    d["reference"] = PREFIX[kind][0] + d["reference"]
    (root / "definition.json").write_text(json.dumps(d))
    return root


@pytest.mark.parametrize("kind", sorted(PREFIX))
def test_hostile_reference_is_one_line(tmp_path, kind):
    with pytest.raises(SolkitError, match=PREFIX[kind][1]) as exc:
        analyze_problem_isolated(_hostile(tmp_path, kind), timeout_s=4)
    assert "\n" not in str(exc.value)


def test_honest_reference_gives_the_in_process_answer():
    from solkit.sol.analysis import analyze_problem

    here = analyze_problem(EXAMPLE, arch="h200-sxm")
    child = analyze_problem_isolated(EXAMPLE, arch="h200-sxm")
    assert [r.uuid for r in child] == [r.uuid for r in here]
    assert [r.analysis.sol.t_sol_s for r in child] == [r.analysis.sol.t_sol_s for r in here]


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_nonsense_timeout(timeout):
    with pytest.raises(SolkitError, match="positive number of seconds"):
        analyze_problem_isolated(EXAMPLE, timeout_s=timeout)


def test_cli_analyze_of_a_hanging_reference_ends_with_one_line(tmp_path, capsys):
    from solkit.cli import main

    rc = main(["analyze", str(_hostile(tmp_path, "hang")), "--timeout", "4", "--arch", "h200-sxm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "did not finish within 4 s" in err[0]
