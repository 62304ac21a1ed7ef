"""solkit.kernels.common.tuned: the one loader of tuned settings (refuses an entry without its evidence, names the
file of a malformed YAML), and the two lookups (for_width, path_options)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.common import tuned

FAMILIES = ("gemm", "norms", "rope", "gates")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_family(monkeypatch, tmp_path):
    """A family whose configs.yaml is ``tmp_path/configs.yaml`` (written by the test)."""
    monkeypatch.setattr(tuned.resources, "files", lambda package: tmp_path)
    tuned._read.cache_clear()
    yield tmp_path / "configs.yaml"
    tuned._read.cache_clear()


def test_loads_entry_without_its_source(fake_family):
    fake_family.write_text("k:\n  source: benchmarks/results/x.json\n  block: 64\n  by_width: {4096: {block: 128}}\n")
    assert tuned.load("fake", "k") == {"block": 64, "by_width": {4096: {"block": 128}}}
    assert tuned.sources("fake") == {"k": ["benchmarks/results/x.json"]}


def test_load_gives_a_fresh_copy(fake_family):
    fake_family.write_text("k:\n  source: [a.json, b.json]\n  nested: {n: 1}\n")
    tuned.load("fake", "k")["nested"]["n"] = 2
    assert tuned.load("fake", "k")["nested"]["n"] == 1
    assert tuned.sources("fake")["k"] == ["a.json", "b.json"]


@pytest.mark.parametrize("text", ["k:\n  block: 64\n", "k:\n  source: ''\n  block: 64\n", "k:\n  source: []\n"])
def test_refuses_an_entry_without_source(fake_family, text):
    fake_family.write_text(text)
    with pytest.raises(SolkitError, match="k: needs a source"):
        tuned.load("fake")


@pytest.mark.parametrize("text", ["k: [unclosed\n", "k:\n  a: 1\n b: 2\n"])
def test_malformed_yaml_names_the_file(fake_family, text):
    fake_family.write_text(text)
    with pytest.raises(SolkitError, match=r"solkit/kernels/fake/configs.yaml: not valid YAML"):
        tuned.load("fake")


@pytest.mark.parametrize("text", ["- a\n- b\n", "k: 3\n"])
def test_wrong_shapes_are_refused(fake_family, text):
    fake_family.write_text(text)
    with pytest.raises(SolkitError, match="fake/configs.yaml"):
        tuned.load("fake")


def test_unknown_entry_lists_the_entries(fake_family):
    fake_family.write_text("a:\n  source: x\nb:\n  source: y\n")
    with pytest.raises(SolkitError, match="no entry 'c'; have a, b"):
        tuned.load("fake", "c")


@pytest.mark.parametrize("family", FAMILIES)
def test_family_files_load_and_name_results_files(family):
    """Every entry of the families' files loads; each source under benchmarks/results/ exists."""
    assert tuned.load(family)
    for entry, files in tuned.sources(family).items():
        for f in files:
            if f.startswith("benchmarks/results/"):
                assert (ROOT / f).exists(), f"{family}.{entry}: {f} does not exist"


@pytest.mark.parametrize(
    ("n_cols", "block"),
    [(1, 64), (100, 64), (1024, 64), (1025, 96), (2047, 96), (2048, 96), (3000, 128), (4096, 128), (65536, 128)],
)
def test_for_width_takes_the_widest_override_that_applies(n_cols, block):
    """Widths are padded to a power of two first: 1025 and 2047 count as 2048."""
    cfg = {"block": 64, "warps": 4, "by_width": {2048: {"block": 96}, 4096: {"block": 128}}}
    got = tuned.for_width(cfg, n_cols)
    assert got["block"] == block and got["warps"] == 4


def test_for_width_without_overrides():
    assert tuned.for_width({"block": 8}, 12345) == {"block": 8}


RANGES = [(1024, 4096, {"a": 1}), (8192, None, {"a": 2})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n_cols", [17, 1024, 5000, 8192])
def test_path_options_on_the_cpu_defaults_to_none(dtype, n_cols):
    """With no choice the optional path is a GPU default only: never on the CPU / under the interpreter."""
    t = torch.empty(3, n_cols, dtype=dtype)
    assert tuned.path_options(None, (), t, RANGES) is None


def test_path_options_explicit_choices():
    t = torch.empty(2, 33)
    assert tuned.path_options({"a": 5}, (), t, RANGES) == {"a": 5}
    assert tuned.path_options(True, (), t, RANGES) == {}
    assert tuned.path_options(False, (), t, RANGES) is None


def test_for_arch_overrides_and_measured_flag():
    from solkit.kernels.common.tuned import arch_key, for_arch

    entry = {"num_warps": 8, "per_sm": 4, "by_arch": {"sm_80": {"per_sm": 2}}, "measured_on": ["sm_90"]}
    assert for_arch(entry, (9, 0)) == ({"num_warps": 8, "per_sm": 4}, True)
    assert for_arch(entry, (8, 0)) == ({"num_warps": 8, "per_sm": 2}, True)
    assert for_arch(entry, (12, 0)) == ({"num_warps": 8, "per_sm": 4}, False)
    assert arch_key(None) == "interpreter" and arch_key((10, 0)) == "sm_100"
