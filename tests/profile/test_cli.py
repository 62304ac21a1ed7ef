"""`solkit profile` from the command line on a CPU machine without ncu: exit 0, degraded report,
one-line explanations; bad input: one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = Path(__file__).parent / "problems" / "tiny_rmsnorm"


def _run(args, tmp_path):
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent)  # no ncu, no nvidia-smi
    env.pop("SOLKIT_NCU", None)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(
        [sys.executable, "-m", "solkit.cli", "profile", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )


def test_cli_without_ncu_exits_zero_with_degraded_report(tmp_path):
    out = tmp_path / "rep"
    proc = _run([str(TINY), "--solution", str(TINY / "solution_torch.py"), "--out", str(out), "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("solkit profile: degraded: ") for ln in lines)
    assert any("ncu not found" in ln for ln in lines)
    report = json.loads(proc.stdout)
    assert [t["label"] for t in report["targets"]] == ["rmsnorm_f32_h64.reference", "rmsnorm_f32_h64.solution_torch"]
    for t in report["targets"]:
        assert t["ok"], t.get("error")
        assert t["timing"]["median_ms"] > 0
        assert t["torch_kernels"], "the CPU op list is the part that still works"
        assert t["diagnosis"]["model_bytes"] == (5 * 64 * 2 + 64) * 4
    for suffix in ("md", "html", "json"):
        assert (out / f"profile.{suffix}").stat().st_size > 0
    assert "Degraded" in (out / "profile.md").read_text()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["/nonexistent/problem"], "not a problem directory"),
        ([str(TINY), "--workload", "nope"], "no workload"),
        ([str(TINY), "--timeout", "0"], "--timeout"),
        ([str(TINY), str(TINY), "--solution", str(TINY / "solution_torch.py")], "exactly one PROBLEM_DIR"),
        ([str(TINY), "--solution", str(TINY / "missing.json")], "file not found"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, args, needle):
    from solkit.cli import main

    assert main(["profile", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
