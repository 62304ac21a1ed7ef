"""tools/sass_compare.py end to end on one kernel variant: compiled for sm_90 from HEAD and from the working
tree (no GPU: Triton's compiler and its bundled ptxas / nvdisasm), the report says whether the code is the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "sass_compare.py"


def _git_tree_clean(path: str) -> bool:
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", path], capture_output=True, text=True)
    return out.returncode == 0 and not out.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_one_variant_against_head(tmp_path):
    if not _git_tree_clean("src/solkit/kernels/norms/backward.py"):
        pytest.skip("norms/backward.py has uncommitted changes: HEAD and the working tree may differ")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, str(TOOL), "--base", "HEAD", "--groups", "norm_tma", "--filter",
                    "layernorm bwd tma bias0 fused0", "--out", str(out)], check=True, env=env, capture_output=True,
                   timeout=300)  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["variants"] == 1 and doc["target"] == "sm_90"
    row = doc["rows"][0]
    assert row["kernel"] == "layernorm bwd tma bias0 fused0"
    assert row["instructions"] > 100  # a real disassembly, not an empty one
    assert row["ptx_same"] and row["sass_same"]  # the same source twice gives the same code
    assert doc["sass_identical"] == 1
