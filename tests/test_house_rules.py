"""House rules of the source tree that no other test would notice breaking."""

import ast
import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "solkit"


def test_every_class_name_in_src_is_unique():
    """Two classes with one name (a ``Problem`` here and a ``Problem`` there) make imports and docs ambiguous."""
    where = collections.defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(ROOT)))
    twins = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twins, f"class names defined more than once: {twins}"


def test_import_contracts_hold():
    """The layers and independence contracts of ``[tool.importlinter]`` in pyproject.toml (as CI runs them)."""
    pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -e '.[test]')")
    exe = shutil.which("lint-imports")
    cmd = [exe] if exe else [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                                                   "sys.exit(lint_imports_command())"]  # fmt: skip
    proc = subprocess.run([*cmd, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
