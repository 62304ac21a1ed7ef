"""Packaging: the version floors the code needs, and the README's install text for machines without a GPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _floor(deps: list[str], name: str) -> tuple[int, ...]:
    spec = next(d for d in deps if re.match(rf"{name}\b", d))
    m = re.search(r">=\s*([0-9.]+)", spec)
    assert m, spec
    return tuple(int(x) for x in m.group(1).split("."))


def test_version_floors_match_what_the_code_calls():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert _floor(deps, "torch") >= (2, 8)  # torch.cuda.Event(external=True)
    assert _floor(deps, "triton") >= (3, 4)  # tl.make_tensor_descriptor


def test_readme_says_how_to_install_without_a_gpu_and_how_long_tests_take():
    text = (ROOT / "README.md").read_text()
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text
    assert re.search(r"`.ci/run` took \d+ s on \d{4}-\d\d-\d\d", text) and re.search(r"suite was \d+ s", text)
