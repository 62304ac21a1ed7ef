"""Every results file the docs cite exists and is in benchmarks/results/index.yaml, and the index is whole."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = yaml.safe_load((RESULTS / "index.yaml").read_text())["results"]
INDEXED = [e["path"].rstrip("/") for e in INDEX]
REF = re.compile(r"benchmarks/results/[A-Za-z0-9_./-]*[A-Za-z0-9_/]")
CITERS = ["docs/**/*.md", "README.md", "lab/README.md", "benchmarks/README.md"]


def _files(patterns):
    return sorted({f for p in patterns for f in ROOT.glob(p)})


def doc_refs() -> list[tuple[str, str]]:
    out = [(str(f.relative_to(ROOT)), ref) for f in _files(CITERS) for ref in REF.findall(f.read_text())]
    for f in ROOT.glob("src/**/configs.yaml"):
        for name, entry in (yaml.safe_load(f.read_text()) or {}).items():
            sources = entry.get("source") if isinstance(entry, dict) else None
            for src in [sources] if isinstance(sources, str) else sources or []:
                if src.startswith("benchmarks/results/"):
                    out.append((f"{f.relative_to(ROOT)}:{name}", src))
    return out


def indexed(ref: str) -> bool:
    ref = ref.rstrip("/")
    if ref == "benchmarks/results/index.yaml":
        return True
    if (ROOT / ref).is_dir() and (ROOT / ref) in (RESULTS, *RESULTS.iterdir()):
        return True  # the results root or a topic folder, named as a place
    return any(ref == p or ref.startswith(p + "/") for p in INDEXED)


REFS = doc_refs()


def test_the_docs_cite_results():
    assert len(REFS) > 100  # the pattern still finds the docs' references


@pytest.mark.parametrize("where, ref", REFS, ids=[f"{w}->{r}" for w, r in REFS])
def test_reference_exists_and_is_indexed(where, ref):
    assert (ROOT / ref).exists(), f"{where} cites {ref}, which does not exist"
    assert indexed(ref), f"{where} cites {ref}, which benchmarks/results/index.yaml does not list"


def test_index_entries_exist_and_cover_every_results_file():
    for entry in INDEX:
        assert (ROOT / entry["path"]).exists(), entry["path"]
        for key in ("topic", "date", "device", "script", "plan", "commit", "backs"):
            assert key in entry, (entry["path"], key)
    listed = set(INDEXED)
    on_disk = {str(p.relative_to(ROOT)) for t in RESULTS.iterdir() if t.is_dir() for p in t.iterdir()}
    assert on_disk == listed, f"not indexed: {sorted(on_disk - listed)}; gone: {sorted(listed - on_disk)}"


def test_no_pre_move_names_left_in_docs():
    moves = ROOT / "lab" / "benchmarks" / "results_map.tsv"
    old = [line.split("\t")[0].rsplit("/", 1)[1] for line in moves.read_text().splitlines()]
    pattern = re.compile(r"(?<![A-Za-z0-9_/-])(" + "|".join(map(re.escape, old)) + r")(?![A-Za-z0-9_]|\.py|\.sh)")
    for f in _files(["docs/**/*.md", "README.md", "src/**/configs.yaml"]):
        hits = pattern.findall(f.read_text())
        assert not hits, f"{f.relative_to(ROOT)} names results by their old names: {sorted(set(hits))}"
