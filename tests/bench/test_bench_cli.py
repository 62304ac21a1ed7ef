"""The main job end to end on the CPU (a small subset of the s suite, to keep CI fast)."""

import json
import subprocess
import sys

import pytest

from solkit.backends import BACKENDS
from solkit.bench.runner import BenchConfig, check, expected, select, suite_problems


def run_cli(*argv, timeout=600):
    return subprocess.run([sys.executable, "-m", "solkit.cli", *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    p = run_cli("bench", "--ops", "rmsnorm,o_proj_residual,embedding,cross_entropy", "--size", "s", "--reps", "3",
                "--out", str(out), "--what-if", "a100-sxm4-80gb,b200", "--calibration", "quick",
                "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return out, json.loads(p.stdout)


def test_rows_have_verdicts_and_sol(bench_run):
    out, d = bench_run
    rows = d["rows"]
    assert {r["problem"] for r in rows} == {"rmsnorm", "o_proj_residual", "embedding", "cross_entropy"}
    assert all(r["status"] in ("ok", "incorrect", "error", "unavailable") for r in rows)
    eager = [r for r in rows if r["backend"] == "eager"]
    assert eager and all(r["status"] == "ok" for r in eager)
    for r in eager:
        assert r["ms"] > 0 and r["fused_bytes"] > 0
        assert r["sol_calibrated"] is not None and 0 < r["sol_calibrated"] <= 1.0
        assert r["timing"]["method"] == "wall"


def test_embedding_bytes_count_only_the_rows_looked_up(bench_run):
    # A gather reads T rows, not the whole V x H table (charging the table gave SOL violations on GPUs).
    _, d = bench_run
    emb = [r for r in d["rows"] if r["problem"] == "embedding" and r["status"] == "ok"]
    assert emb
    for r in emb:
        t, h = r["axes"]["num_tokens"], r["axes"]["hidden_size"]
        assert r["fused_bytes"] == 8 * t + 2 * 2 * t * h


def test_report_files_written(bench_run):
    out, d = bench_run
    for name in ("results.json", "results.csv", "report.md", "report.html", "roofline.png", "sol_histogram.png",
                 "per_op.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    assert "| rmsnorm | s |" in md and "timing:" in md
    # A quick calibration says so wherever the calibrated basis is shown; every row has a verdict in every format.
    html = (out / "report.html").read_text()
    assert "QUICK calibration" in md and "QUICK calibration" in html and "quick calibration" in md
    assert "arch None" not in md and "(CPU, " in md
    csv_text = (out / "results.csv").read_text().splitlines()
    assert "verdict" in csv_text[0].split(",")
    assert all(any(v in line for v in ("ok", "noisy", "violation", "incorrect", "error", "unavailable"))
               for line in csv_text[1:])  # fmt: skip


def test_what_if_rows_in_results(bench_run):
    out, d = bench_run
    wi = json.loads((out / "results.json").read_text())["what_if"]
    assert d["what_if"] == wi and wi["products"] == ["a100-sxm4-80gb", "b200"] and wi["kind"] == "analysis"
    measured = [r for r in d["rows"] if r["status"] == "ok"]
    assert len(wi["rows"]) == len(measured)
    for r in wi["rows"]:
        assert set(r["products"]) == {"a100-sxm4-80gb", "b200"}
        assert all(c["t_sol_ms"] > 0 and c["bound"] in ("compute", "memory") for c in r["products"].values())
    assert "(analysis)" in (out / "report.md").read_text()


def test_report_rebuild_and_compare(bench_run, tmp_path):
    out, _ = bench_run
    p = run_cli("report", str(out / "results.json"), "--out", str(tmp_path), "--json")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "report.html").exists()
    p = run_cli("report", str(out), str(out), "--json")
    rows = json.loads(p.stdout)
    assert rows and all(r["speedup_b_over_a"] in (None, 1.0) for r in rows)


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "--size", "xl"], "allowed: s, m, l"),
    (["bench", "--backends", "tensorrt"], "allowed: eager"),  # not a backend
    (["bench", "--mode", "train"], "allowed: fwd, bwd, fwd_bwd"),
    (["bench", "--ops", "no_such_op"], "no suite problem matches"),
    (["report", "/nonexistent/results.json"], "no such results file"),
    (["bench", "--size", "s", "--what-if", "h300"], "--what-if: unknown product id 'h300'; allowed:"),
])  # fmt: skip
def test_bad_input(argv, needle):
    p = run_cli(*argv)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_list_backends_json():
    p = run_cli("bench", "--list-backends", "--json", "--device", "cpu")
    d = {r["backend"]: r for r in json.loads(p.stdout)}
    assert set(d) == set(BACKENDS)
    assert d["eager"]["available"] and not d["solkit"]["available"]


def test_select_modes():
    probs = suite_problems()
    fwd = select(probs, BenchConfig(device="cpu", sizes=("s",), modes=("fwd",)))
    bwd = select(probs, BenchConfig(device="cpu", sizes=("s",), modes=("bwd",)))
    assert fwd and bwd and not {p.definition.name for p, _ in fwd} & {p.definition.name for p, _ in bwd}


def test_check_rejects_wrong_results():
    import torch

    hi = (torch.randn(64, 64, dtype=torch.float64),)
    eager = (hi[0].to(torch.bfloat16),)
    exp = expected(eager, hi)
    assert check(eager, exp)[0]
    bad = (eager[0] + 0.5,)
    assert not check(bad, exp)[0]
    nan = (eager[0].clone().fill_(float("nan")),)
    assert not check(nan, exp)[0]
    assert not check((eager[0].float(),), exp)[0]  # wrong dtype
