"""docs/tutorial.md runs as written on a CPU: its files are written, its commands run in order, each must succeed.

A fenced block preceded by ``<!-- file: PATH -->`` is written to PATH; every line of a ``bash`` block is a
command. Only to keep CI short, ``solkit eval`` gets short CPU timing flags the page does not show.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).parents[1] / "docs" / "tutorial.md"
CI_ONLY = {"eval": ["--cpu-timing-budget", "0.2", "--timing-trials", "1", "--cpu-threads", "1"]}
# What each command's output must show (the page's claims), by the command's first words.
EXPECT = {
    "analyze": ["axpy-16m", "memory"],
    "eval": ["PASSED of 1 workloads"],
    "sol": ["0.042", "0.839", "memory"],
    "profile": ["profile/profile.md"],
    "tune": ["best", "4 evaluated"],
}


def steps(text: str) -> list[tuple[str, str, str]]:
    """(kind, path or command, content) in page order: ("file", path, body) and ("run", command, "")."""
    out = []
    pattern = r"(?:<!-- file: (?P<path>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```"
    for m in re.finditer(pattern, text, re.S):
        if m["path"]:
            out.append(("file", m["path"], m["body"]))
        elif m["lang"] == "bash":
            out += [("run", line.strip(), "") for line in m["body"].splitlines() if line.strip()]
    return out


def test_the_page_has_every_step():
    runs = [cmd for kind, cmd, _ in steps(PAGE.read_text()) if kind == "run"]
    for word in ("analyze", "eval", "sol", "profile", "tune"):
        assert any(cmd.startswith(f"solkit {word} ") for cmd in runs), word
    files = [p for kind, p, _ in steps(PAGE.read_text()) if kind == "file"]
    assert {"problems/axpy/definition.json", "axpy_torch.py", "axpy_triton.py"} <= set(files)


def test_tutorial_runs_on_cpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # solkit must set it by itself
    env["SOLKIT_TUNE_CACHE"] = str(tmp_path / "tune-cache")
    for kind, what, body in steps(PAGE.read_text()):
        if kind == "file":
            (tmp_path / what).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / what).write_text(body)
            continue
        argv = shlex.split(what)
        if argv[0] == "mkdir":
            subprocess.run(argv, cwd=tmp_path, check=True)
            continue
        assert argv[0] == "solkit", what
        command = argv[1]
        argv = [sys.executable, "-m", "solkit", *argv[1:], *CI_ONLY.get(command, [])]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{what}\n{out[-3000:]}"
        for needle in EXPECT[command]:
            assert needle in out, f"{what}: {needle!r} not in\n{out[-3000:]}"
    assert (tmp_path / "traces.jsonl").read_text().count("\n") == 1
    assert (tmp_path / "profile" / "profile.json").is_file()
