"""run_ncu end to end against a fake ncu executable (no GPU): success, and each failure mode."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from solkit.profile.ncu import find_ncu, run_ncu

FIX = Path(__file__).parent / "fixtures"

FAKE = r"""#!{python}
import os, sys
args = sys.argv[1:]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 36398880)")
    sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
    sys.exit(0)
if mode == "badmetric" and "launch__registers_per_thread" in args[args.index("--metrics") + 1]:
    print("==ERROR== Failed to find metric launch__registers_per_thread")
    sys.exit(1)
if mode == "hang":
    import time; time.sleep(30)
if mode in ("perm", "lib", "none"):
    sys.stdout.write(open(os.environ["FAKE_NCU_OUT"]).read())
    sys.exit(1 if mode != "none" else 0)
open(args[args.index("--export") + 1], "w").write("fake report")
print("==PROF== Connected to process 1\n==PROF== Disconnected from process 1")
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_NCU_CSV", str(FIX / "crafted_raw_three_kernels.csv"))
    return str(exe)


def test_success_parses_kernels(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    run = run_ncu(["python3", "x.py"], tmp_path / "w", ncu=fake_ncu)
    assert run.error is None
    assert len(run.kernels) == 3 and run.version.startswith("2025.3.1")
    assert (tmp_path / "w" / "ncu_raw.csv").exists()
    assert "tensor_ops_fp8" in run.missing_metrics
    assert run.command[run.command.index("--clock-control") + 1] == "none"


@pytest.mark.parametrize(
    "mode,fixture,kind",
    [
        ("perm", "err_nvgpuctrperm.txt", "no_permission"),
        ("lib", "err_library_not_loaded.txt", "profiler_unavailable"),
        ("none", "err_no_kernels.txt", "no_kernels"),
    ],
)
def test_failures_are_classified(fake_ncu, tmp_path, monkeypatch, mode, fixture, kind):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    monkeypatch.setenv("FAKE_NCU_OUT", str(FIX / fixture))
    run = run_ncu(["python3", "x.py"], tmp_path / "w", ncu=fake_ncu)
    assert run.kernels == [] and run.error is not None and run.error.kind == kind


def test_timeout(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    run = run_ncu(["python3", "x.py"], tmp_path / "w", ncu=fake_ncu, timeout_s=1)
    assert run.error.kind == "timeout"


def test_missing_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLKIT_NCU", str(tmp_path / "nope"))
    assert find_ncu() is None
    run = run_ncu(["python3", "x.py"], tmp_path / "w")
    assert run.error.kind == "no_ncu"


def test_find_ncu_env(fake_ncu, monkeypatch):
    monkeypatch.setenv("SOLKIT_NCU", fake_ncu)
    assert find_ncu() == fake_ncu
    monkeypatch.delenv("SOLKIT_NCU")
    monkeypatch.setenv("PATH", str(Path(fake_ncu).parent) + os.pathsep + os.environ.get("PATH", ""))
    assert find_ncu() == fake_ncu


def test_rejected_metric_retries_with_core_set(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "badmetric")
    run = run_ncu(["python3", "x.py"], tmp_path / "w", ncu=fake_ncu)
    assert run.error is None and len(run.kernels) == 3
    assert "launch__registers_per_thread" not in run.command[run.command.index("--metrics") + 1]
    assert "retried with the core metric set" in run.output
    assert "registers_per_thread" not in run.kernels[0].metrics
