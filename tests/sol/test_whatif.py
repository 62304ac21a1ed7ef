"""What-if SOL across products, with hand-checked numbers."""

import pytest

from solkit.errors import SolkitError
from solkit.sol.whatif import WorkRow, bound_changes, markdown_table, what_if, what_if_table

N = 8192
GEMM = WorkRow("gemm 8192^3 bf16", {"bf16_tensor": 2 * N**3}, 3 * N * N * 2)
# RMSNorm of 4096 x 8192 bf16: read x and the weight, write y; ~4 fp32 FLOPs per element.
RMS = WorkRow("rmsnorm 4096x8192 bf16", {"fp32_vector": 4 * 4096 * N}, 2 * 4096 * N * 2 + N * 2)
# A GEMM of arithmetic intensity 200 FLOP/B: above the A100's ridge (312/2.039 = 153), below the B200's (293).
MID = WorkRow("gemm 600^3 bf16", {"bf16_tensor": 2 * 600**3}, 3 * 600 * 600 * 2)
FP8 = WorkRow("gemm fp8", {"fp8_tensor": 1e12}, 1e6)


@pytest.mark.parametrize(("product", "ms"), [
    ("a100-sxm4-80gb", 2 * N**3 / 312e12 * 1e3),   # 3.524 ms
    ("h200-sxm", 2 * N**3 / 989.4e12 * 1e3),       # 1.111 ms
    ("b200", 2 * N**3 / 2250e12 * 1e3),            # 0.4887 ms
])  # fmt: skip
def test_big_gemm_is_compute_bound_everywhere(product, ms):
    (w,) = what_if(GEMM, [product])
    assert w.bound == "compute" and w.t_sol_s * 1e3 == pytest.approx(ms, rel=1e-9)
    assert w.arithmetic_intensity == pytest.approx(2 * N**3 / (3 * N * N * 2))


def test_hand_checked_values():
    a100, h200, b200 = what_if(GEMM, ["a100-sxm4-80gb", "h200-sxm", "b200"])
    assert a100.t_sol_s == pytest.approx(3.524e-3, rel=1e-3)
    assert h200.t_sol_s == pytest.approx(1.1113e-3, rel=1e-3)
    assert b200.t_sol_s == pytest.approx(0.48868e-3, rel=1e-3)


def test_rmsnorm_is_memory_bound_everywhere():
    products = ["a100-sxm4-80gb", "h100-sxm", "h200-sxm", "b200", "rtx-4090", "l4", "rtx-5090"]
    cells = what_if_table([RMS], products)[RMS.name]
    assert {w.bound for w in cells.values()} == {"memory"}
    assert cells["h200-sxm"].t_sol_s == pytest.approx(RMS.bytes / 4.8e12)  # 27.97 µs
    assert cells["a100-sxm4-80gb"].t_sol_s == pytest.approx(RMS.bytes / 2039e9)  # 65.83 µs
    assert not bound_changes([RMS], products)


def test_bound_changes_between_products():
    changes = bound_changes([GEMM, RMS, MID], ["a100-sxm4-80gb", "h200-sxm", "b200"])
    assert changes == [("gemm 600^3 bf16", {"a100-sxm4-80gb": "compute", "h200-sxm": "memory", "b200": "memory"})]


def test_missing_unit_is_unavailable_with_a_reason():
    a100, h200 = what_if(FP8, ["a100-sxm4-80gb", "h200-sxm"])
    assert not a100.available and a100.reason == "no fp8_tensor on a100-sxm4-80gb"
    assert h200.available and h200.bound == "compute"


def test_tier_assumes_the_same_fraction():
    row = WorkRow("measured", RMS.flops, RMS.bytes, sol_fraction=0.9, measured_on="h200-sxm")
    tiers = {w.tier for w in what_if(row, ["a100-sxm4-80gb", "b200"])}
    assert len(tiers) == 1 and None not in tiers
    assert what_if(RMS, ["b200"])[0].tier is None


def test_markdown_table():
    md = markdown_table([GEMM, MID, FP8], ["a100-sxm4-80gb", "b200"])
    lines = md.splitlines()
    assert lines[0] == "| row | a100-sxm4-80gb | b200 |"
    assert lines[2].startswith("| gemm 8192^3 bf16 | 3.52 ms C | 489 µs C")
    assert lines[3].startswith("| gemm 600^3 bf16 * |") and lines[3].endswith("M |")
    assert "n/a (no fp8_tensor on a100-sxm4-80gb)" in lines[4]


def test_duplicate_rows_rejected():
    with pytest.raises(SolkitError):
        what_if_table([GEMM, GEMM], ["b200"])
