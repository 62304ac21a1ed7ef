"""`solkit hw show ID`: the record, the compute capability's limits and the kernels' paths (CPU)."""

import json

import pytest

import solkit.kernels
from solkit.cli import main
from solkit.kernels.common.capability import Needs, choose

FAKE_PATHS = {
    "softmax_fwd": (("tma", Needs(min_cc=(9, 0), tma=True)), ("portable", Needs())),
    "gemm": (("hopper", Needs(min_cc=(9, 0), max_cc=(10, 0), wgmma=True)), ("portable", Needs())),
}


def fake_describe(caps):
    out = {}
    for kernel, paths in FAKE_PATHS.items():
        path, skipped = choose(paths, caps)
        out[kernel] = {"path": path, "skipped": skipped}
    return out


@pytest.fixture
def paths(monkeypatch):
    # The real table comes from kernels/paths.py (the families' PATHS); the section only needs its contract.
    monkeypatch.setattr(solkit.kernels, "kernel_paths", fake_describe, raising=False)


def test_show_json_has_limits_and_paths(paths, capsys):
    assert main(["hw", "show", "rtx-4090", "--json", "--paths"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cc_limits"]["smem_per_block_bytes"]["value"] == 101376
    assert d["cc_limits"]["tma"]["value"] is False
    kp = d["kernel_paths"]
    assert kp["gemm"]["path"] == "portable" and "wgmma" in " ".join(kp["gemm"]["skipped"]["hopper"])
    assert kp["softmax_fwd"]["path"] == "portable"


def test_show_h200_takes_fast_paths(paths, capsys):
    assert main(["hw", "show", "h200-sxm", "--json", "--paths"]) == 0
    kp = json.loads(capsys.readouterr().out)["kernel_paths"]
    assert kp["gemm"] == {"path": "hopper", "skipped": {}}
    assert kp["softmax_fwd"]["path"] == "tma"


def test_show_table_lists_paths_and_reasons(paths, capsys):
    assert main(["hw", "show", "b200", "--paths"]) == 0
    out = capsys.readouterr().out
    assert "kernel paths on b200" in out and "per-SM limits" in out
    assert "hopper" in out and "portable" in out


def test_show_amd_product_says_why_no_paths(paths, capsys):
    assert main(["hw", "show", "mi300x", "--json", "--paths"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cc_limits"] is None
    assert "NVIDIA" in d["kernel_paths"]["error"]


def test_show_unknown_id_is_one_line(capsys):
    assert main(["hw", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h200-sxm" in err


def test_show_with_the_real_paths_table(capsys):
    # The families' PATHS: every public kernel has a path on an sm_89 part, and none of them needs TMA there.
    assert main(["hw", "show", "rtx-4090", "--json", "--paths"]) == 0
    kp = json.loads(capsys.readouterr().out)["kernel_paths"]
    assert "gemm" in kp and all(d["path"] for d in kp.values())
    assert all("tma" not in d["path"] for d in kp.values())
