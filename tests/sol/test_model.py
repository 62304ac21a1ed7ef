import math

import pytest

from solkit.errors import SolkitError
from solkit.sol.ceilings import spec_ceilings
from solkit.sol.model import Ceilings, anchored_score, bandwidth_utilization, mfu, sol_fraction, t_sol
from solkit.sol.tiers import tier_for

C = Ceilings(arch="test", basis="spec", flops={"bf16_tensor": 1e15, "fp32_vector": 5e13}, bandwidth=4e12)


def test_compute_bound_gemm():
    r = t_sol({"bf16_tensor": 1e12}, 1e9, spec_ceilings("h100-sxm"))
    assert r.t_sol_ms == pytest.approx(1.0107, rel=1e-4)
    assert r.bound == "compute"
    assert r.arithmetic_intensity == pytest.approx(1000)


def test_memory_bound():
    r = t_sol({"fp32_vector": 1e6}, 4e9, C)
    assert r.bound == "memory" and r.t_sol_s == pytest.approx(1e-3)


def test_units_overlap_so_compute_term_is_the_slowest_unit():
    r = t_sol({"bf16_tensor": 1e12, "fp32_vector": 2.5e10}, 0, C)
    assert r.t_compute_s == pytest.approx(max(1e12 / 1e15, 2.5e10 / 5e13))


@pytest.mark.parametrize(
    "units, expected", [({"fp32_vector": 2e12}, 2e12), ({"fp32_vector": 2e12, "tf32_tensor": 8e12}, 8e12)]
)
def test_tf32_falls_back_to_the_fp32_vector_unit(units, expected):
    # a CPU has no TF32 tensor cores: fp32 work that TF32 is allowed for is charged to its vector units
    c = Ceilings("cpu-derived", "calibrated", units, 1e11)
    assert c.peak("tf32_tensor") == expected
    with pytest.raises(SolkitError, match="bf16_tensor"):
        c.peak("bf16_tensor")


def test_unknown_unit_is_an_error():
    with pytest.raises(SolkitError, match="fp8_tensor"):
        t_sol({"fp8_tensor": 1.0}, 0, C)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_bad_bytes(bad):
    with pytest.raises(SolkitError):
        t_sol({}, bad, C)


def test_sol_fraction_and_violation():
    s = sol_fraction(1e-3, 2e-3)
    assert s.sol_fraction == pytest.approx(0.5) and not s.violation
    v = sol_fraction(2e-3, 1e-3)
    assert v.violation and v.sol_fraction == 1.0 and v.raw_fraction == pytest.approx(2.0)


def test_anchored_score():
    assert anchored_score(1.0, 2.0, 1.0) == pytest.approx(1.0)
    assert anchored_score(2.0, 2.0, 1.0) == pytest.approx(0.5)
    assert anchored_score(5.0, 2.0, 1.0) == pytest.approx(0.2)
    assert math.isnan(anchored_score(1.0, 0.5, 1.0))


def test_mfu_and_bandwidth():
    assert mfu(1e12, 1e-3, 1e15) == pytest.approx(1.0)
    assert bandwidth_utilization(2e9, 1e-3, 4e12) == pytest.approx(0.5)


TIER_CASES = [
    (0.3, "fuse-and-fix-memory"),
    (0.6, "schedule-and-reuse"),
    (0.79, "schedule-and-reuse"),
    (0.8, "near-the-limit"),
    (1.0, "near-the-limit"),
]


@pytest.mark.parametrize(("f", "name"), TIER_CASES)
def test_tiers(f, name):
    t = tier_for(f, "compute")
    assert t.name == name and t.advice
