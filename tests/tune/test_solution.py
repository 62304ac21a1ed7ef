"""``solkit tune PROBLEM_DIR --solution FILE`` end to end (Triton interpreter on the CPU)."""

import json
from pathlib import Path

from solkit.cli import main

PROBLEM = Path(__file__).parent / "data" / "scale_problem"


def test_tune_solution_cli_skips_wrong_variants_and_uses_the_cache(tmp_path, capsys):
    argv = ["tune", str(PROBLEM), "--solution", str(PROBLEM / "solution.json"), "--budget", "20",
            "--cache-dir", str(tmp_path), "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["HALF"] == 0
    assert out["statuses"]["wrong_result"] >= 1  # HALF=1 configs are caught by the correctness gate
    assert out["evaluated"] == out["space_size"] == 14
    assert main(argv) == 0  # second run: everything comes from the cache
    again = json.loads(capsys.readouterr().out)
    assert again["evaluated"] == 0 and again["best"] == out["best"]


def test_tune_solution_errors(tmp_path, capsys):
    bare = tmp_path / "bare.py"
    bare.write_text("def run(x, y):\n    y.copy_(2 * x)\n")
    assert main(["tune", str(PROBLEM), "--solution", str(bare)]) == 2
    assert "SOLKIT_TUNE_SPACE" in capsys.readouterr().err
    assert main(["tune", str(PROBLEM), "--solution", str(tmp_path / "none.json")]) == 2
    assert main(["tune", str(PROBLEM), "--solution", str(PROBLEM / "solution.json"), "--workload", "5"]) == 2
    assert "workloads 0..0" in capsys.readouterr().err
