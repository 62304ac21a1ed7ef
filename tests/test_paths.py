"""One cache root (solkit.paths) and one expression evaluator (solkit.problems.expr) in the product."""

import re
from pathlib import Path

from solkit.hardware.calibrate import cache_path
from solkit.hardware.detect import DeviceInfo
from solkit.paths import cache_dir, cache_root
from solkit.tune.cache import default_root

SRC = Path(__file__).parents[1] / "src" / "solkit"


def test_every_cache_lives_under_the_one_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SOLKIT_TUNE_CACHE", raising=False)
    assert cache_root() == tmp_path and cache_dir("tune") == tmp_path / "tune"
    assert default_root() == tmp_path / "tune"  # the tune cache used to ignore SOLKIT_CACHE_DIR
    info = DeviceInfo(kind="cpu", name="test cpu")
    assert cache_path(info).parent == tmp_path / "calibration"
    monkeypatch.setenv("SOLKIT_TUNE_CACHE", str(tmp_path / "elsewhere"))
    assert default_root() == tmp_path / "elsewhere"  # the tune cache's own override stays
    monkeypatch.delenv("SOLKIT_CACHE_DIR")
    assert cache_root().name == "solkit"


def _sources():
    return [(p.relative_to(SRC).as_posix(), p.read_text()) for p in SRC.rglob("*.py")]


def test_one_home_for_the_cache_root_and_the_expression_evaluator():
    roots = [name for name, text in _sources() if re.search(r"user_cache_dir|SOLKIT_CACHE_DIR|~/\.cache", text)]
    assert roots == ["paths.py"]
    evaluators = [name for name, text in _sources() if re.search(r"mode=\"eval\"", text)]
    assert evaluators == ["problems/expr.py"]
    assert not [name for name, text in _sources() if re.search(r"(?<![\w.])eval\(\s*(code|compile)", text)]
