"""tools/arch_check.py: the rows and their failure rules, the page blocks and the check, and one real capture and
compile (the gate kernel through its dispatcher, for sm_80 and sm_90) without a GPU. CI runs the whole matrix
with ``python3 tools/arch_check.py --check docs/arch.md`` (.ci/run)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "arch_check.py"

#: One workload kernel per direction of every public kernel, as in the issue-27 contract (``PATHS`` keys).
KERNELS = {
    "gemm", "rmsnorm_fwd", "rmsnorm_bwd", "add_rmsnorm_fwd", "layernorm_fwd", "layernorm_bwd", "softmax_fwd",
    "softmax_bwd", "cross_entropy", "rope_fwd", "rope_bwd", "swiglu_fwd", "swiglu_bwd", "geglu_fwd",
    "geglu_bwd", "fused_linear_cross_entropy",
}  # fmt: skip


def _tool():
    spec = importlib.util.spec_from_file_location("arch_check", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["arch_check"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


def _caps(smem=99 * 1024, regs=65536):
    from types import SimpleNamespace

    return SimpleNamespace(smem_per_block=smem, regs_per_sm=regs)


def _launch(A, name, warps=4):
    return A.Launch(f"m:{name}", False, {"x": "*bf16"}, {}, {}, {"num_warps": warps})


def test_rows_and_failure_rules():
    A = _tool()
    ok, big, spilly = _launch(A, "_k"), _launch(A, "_big", 16), _launch(A, "_gated_fwd_kernel")
    compiled = {
        ok.key(86): {"ok": True, "regs": 40, "spill": 0, "shared": 1024, "warps": 4},
        big.key(86): {"ok": True, "regs": 255, "spill": 16, "shared": 200 * 1024, "warps": 16},
        spilly.key(86): {"ok": True, "regs": 255, "spill": 64, "shared": 0, "warps": 4},
        ok.key(120): {"ok": False, "error": "PTXASError: boom", "warps": 4},
    }
    row = A.build_row("k", "s", 86, [ok, ok], compiled, _caps())
    assert row.ok and row.fits and row.errors == [] and row.launched == "k x2" and (row.regs, row.shared) == (40, 1024)
    row = A.build_row("k", "s", 86, [ok, big], compiled, _caps())
    assert not row.fits and row.spill == 16 and row.launched == "k + big"
    assert row.errors == [f"_big: {200 * 1024} B of shared memory, the arch allows {99 * 1024}",
                          "_big: 255 registers x 16 warps exceed the 65536-register file"]  # fmt: skip
    row = A.build_row("k", "s", 86, [spilly], compiled, _caps())  # a spill-free kernel that spills fails
    assert row.spill_free and row.errors == ["_gated_fwd_kernel: spills 64 B per thread on a spill-free path"]
    row = A.build_row("k", "s", 120, [ok], compiled, _caps())
    assert not row.ok and row.errors == ["_k: compile error: PTXASError: boom"]
    row = A.build_row("k", "s", 90, [], compiled, _caps(), error="SolkitError: no path")
    assert A.failures([row]) == ["k [s] sm_90: dispatch error: SolkitError: no path"]
    assert A.build_row("k", "s", 90, [], compiled, _caps()).errors == ["no Triton launch recorded"]


def test_spill_free_names_are_kernels_of_the_product():
    import pkgutil

    import solkit.kernels as K

    A = _tool()
    names = set()
    for m in pkgutil.walk_packages(K.__path__, "solkit.kernels."):
        names |= set(vars(importlib.import_module(m.name)))
    assert not A.SPILL_FREE - names, A.SPILL_FREE - names


def test_launch_key_deduplicates_by_everything_but_debug():
    A = _tool()
    a, b = _launch(A, "_k"), _launch(A, "_k")
    b.options["debug"] = True
    assert a.key(90) == b.key(90) and a.key(90) != a.key(80) and a.key(90) != _launch(A, "_k", 8).key(90)


def test_matrix_round_trip_and_the_check_columns():
    A = _tool()
    rows = [A.Row("k", "8192x4096", 90, "packed", "k", regs=40, spill=0, shared=32),
            A.Row("k", "8192x4096", 80, "portable", "k", regs=48, spill=8, shared=32, spill_free=False)]  # fmt: skip
    md = A.matrix_markdown(rows, archs=(80, 90))
    parsed = A.parse_matrix(md)
    assert parsed[("k", "8192x4096", "sm_90")]["registers"] == "40"
    assert parsed[("k", "8192x4096", "sm_80")]["spill B"] == "8"
    assert "| sm_80 | 1 | 0 | 1 | 0 |" in md
    regs_moved = md.replace("| 40 |", "| 41 |")
    assert A.matrix_differences(regs_moved, md, same_triton=False) == []
    assert A.matrix_differences(regs_moved, md, same_triton=True) == ["k 8192x4096 sm_90: registers 41 on the "
                                                                      "page, 40 now"]  # fmt: skip
    path_moved = md.replace("| packed |", "| tma |")
    assert A.matrix_differences(path_moved, md, same_triton=False) == ["k 8192x4096 sm_90: path tma on the page, "
                                                                       "packed now"]  # fmt: skip


def test_blocks_are_replaced_and_the_prose_kept():
    A = _tool()
    page = "# t\n\nprose\n<!-- arch_check:begin matrix -->\nold\n<!-- arch_check:end matrix -->\nmore prose\n"
    new = A.write_blocks(page, {"matrix": "new\n", "extra": "x\n"})
    assert new.startswith("# t\n\nprose\n") and "more prose\n" in new and "old" not in new
    assert A.read_block(new, "matrix") == "new\n" and A.read_block(new, "extra") == "x\n"
    assert A.page_triton("compiled by Triton 3.9.0 for that") == "3.9.0"


def test_workloads_cover_every_public_kernel_at_two_shapes():
    A = _tool()
    shapes: dict[str, set[str]] = {}
    for w in A.WORKLOADS:
        shapes.setdefault(w.kernel, set()).add(w.shape)
    assert not KERNELS - set(shapes)
    assert all(len(s) >= 2 for s in shapes.values()), shapes
    try:
        from solkit.kernels.paths import all_paths
    except ImportError:
        return
    assert set(all_paths()) <= set(shapes), set(all_paths()) - set(shapes)


def test_every_arch_has_a_product_and_the_page_sections_are_current():
    A = _tool()
    assert set(A.ARCH_PRODUCT) == set(A.ARCHS)
    page = (ROOT / "docs" / "arch.md").read_text()
    assert A.read_block(page, "products") == A.products_markdown()
    assert A.read_block(page, "whatif") == A.whatif_markdown()
    assert A.read_block(page, "matrix") is not None


SNIPPET = """
import dataclasses, json, sys
sys.path.insert(0, {tools!r})
import arch_check as A
w = [w for w in A.WORKLOADS if w.kernel == "swiglu_fwd"][:1]
rows = A.compile_matrix((80, 90), w, jobs=2)
print(json.dumps([dataclasses.asdict(r) for r in rows]))
"""


def test_captures_and_compiles_the_dispatched_gate_kernel_for_sm80_and_sm90_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, not the interpreter
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", SNIPPET.format(tools=str(TOOL.parent))], check=True, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["arch"] for r in rows] == [80, 90]
    for r in rows:
        assert r["ok"] and r["errors"] == [] and r["launched"] == "gated_fwd" and r["spill_free"]
        assert 8 <= r["regs"] <= 255 and r["spill"] == 0 and r["shared"] >= 0 and r["fits"]
    assert rows[0]["smem_limit"] == 163 * 1024 and rows[1]["smem_limit"] == 227 * 1024
