"""solkit model on the command line: JSON and table output, the HTML report in a real browser, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

pytest.importorskip("transformers")

from solkit.cli import main  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
TINY = ["model", "--hf", "llama", "--seq", "8", "--batch", "2", "--device", "cpu", "--arch", "h200-sxm"]
TINY += ["--warmup", "1"]

ENTRY = """
import torch

def make():
    return torch.nn.Linear(8, 4), torch.randn(3, 5)  # the wrong width for the layer

def good():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)), torch.randn(6, 8)
"""


@pytest.fixture(scope="module")
def html_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("model")
    return main([*TINY, "--mode", "train_step", "--html", str(out / "report")]), out / "report"


def test_json(capsys):
    assert main([*TINY, "--mode", "fwd", "--json", "--top", "4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["ops"]) == 4 and d["meta"]["mode"] == "fwd" and d["meta"]["arch"] == "h200-sxm"
    s = d["summary"]
    assert {"measured_ms", "t_sol_ms", "step_sol", "attributed_share", "sum_t_sol_le_measured"} <= set(s)
    lost = [o["lost_ms_median"] for o in d["ops"]]
    assert lost == sorted(lost, reverse=True)  # ranked by the median over the profiled steps of the time lost to SOL
    assert all(o["sol_fraction"] is None or 0 <= o["sol_fraction"] <= 1 for o in d["ops"])


def test_entry_point_table(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_net.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["model", "--entry", "my_net:good", "--device", "cpu", "--arch", "h200-sxm", "--mode", "fwd_bwd"]) == 0
    out = capsys.readouterr().out
    assert "time lost to SOL" in out and "Per module type" in out and "attributed to operators" in out


def test_html_report_is_written(html_run):
    rc, out = html_run
    assert rc == 0
    d = json.loads((out / "results.json").read_text())
    assert d["layers"] and d["categories"]
    text = (out / "report.html").read_text()
    assert text.count("data:image/png;base64,") == 4 and "<h2>Per layer</h2>" in text


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_html_report_opens_in_headless_chromium(html_run, tmp_path):
    rc, out = html_run
    p = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'prof'}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
         (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert 'data-report-ok="yes"' in p.stdout, p.stdout[:500]
    assert not [line for line in p.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert "<h2>Operators, ranked by time lost to SOL</h2>" in p.stdout and 'id="layers"' in p.stdout


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--entry", "no_such_module_xyz:make"], "cannot import module 'no_such_module_xyz'"),
        (["--entry", "my_net:make"], "the model failed|tracing"),
        (["--hf", "gpt17"], "unknown model family 'gpt17'"),
        (["--hf", "llama", "--preset", "llama9"], "--preset 'llama9'"),
        (["--hf", "llama", "--entry", "my_net:good"], "exactly one of"),
        ([], "exactly one of"),
        (["--hf", "llama", "--seq", "0"], "--seq 0"),
        (["--hf", "llama", "--precision", "fast"], "--precision 'fast'"),
        (["--hf", "llama", "--config", "/nonexistent.json"], "--config /nonexistent.json"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    import re

    (tmp_path / "my_net.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["model", "--device", "cpu", "--arch", "h200-sxm", "--json", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("USDT")]  # the profiler's own start/stop lines
    assert len(err) == 1 and re.search(message, err[0]), err
