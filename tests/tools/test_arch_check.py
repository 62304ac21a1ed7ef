"""tools/arch_check.py: compile a kernel for sm_80 and sm_90 without a GPU, the failure rules, the page."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "arch_check.py"


def _tool():
    spec = importlib.util.spec_from_file_location("arch_check", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["arch_check"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


SNIPPET = """
import dataclasses, json, sys
sys.path.insert(0, {tools!r})
import arch_check as A
spec = next(s for s in A.SPECS if s.name.startswith("swiglu"))
print(json.dumps([dataclasses.asdict(r) | {{"fits": r.fits}} for r in A.compile_matrix([spec], (80, 90))]))
"""


def test_compiles_for_sm80_and_sm90_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", SNIPPET.format(tools=str(TOOL.parent))], check=True, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["arch"] for r in rows] == [80, 90]
    for r in rows:
        assert r["ok"] and r["error"] == ""
        assert 8 <= r["regs"] <= 255 and r["spill_bytes"] == 0 and r["shared"] >= 0 and r["fits"]
    assert rows[0]["smem_limit"] == 163 * 1024 and rows[1]["smem_limit"] == 227 * 1024


def test_failure_rules_and_matrix():
    A = _tool()
    R = A.CompileResult
    results = [
        R("k", 90, True, regs=40, spill_bytes=0, shared=1024, smem_limit=227 * 1024),
        R("k", 86, True, regs=40, spill_bytes=0, shared=200 * 1024, smem_limit=99 * 1024),
        R("k", 80, True, regs=255, spill_bytes=64, shared=0, smem_limit=163 * 1024),
        R("k", 120, False, smem_limit=99 * 1024, error="PTXASError: boom"),
    ]
    specs = [A.KernelSpec("k", "m:f", {}, {})]
    assert A.failures(results, specs) == [
        f"k sm_86: {200 * 1024} B of shared memory, the arch allows {99 * 1024}",
        "k sm_80: spills 64 B per thread",
        "k sm_120: compile error: PTXASError: boom",
    ]
    md = A.matrix_markdown(results)
    assert "| k | sm_90 | 40 | 0 | 1024 | yes |" in md and f"no (> {99 * 1024})" in md and "compile error" in md


def test_every_arch_has_a_product_and_the_page_sections_are_current():
    A = _tool()
    assert set(A.ARCH_PRODUCT) == set(A.ARCHS)
    page = (ROOT / "docs" / "arch.md").read_text()
    assert A.products_markdown() in page
    assert A.whatif_markdown() in page


@pytest.mark.slow
def test_page_is_current():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(TOOL), "--check", str(ROOT / "docs" / "arch.md")], env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
