import math

import pytest
import torch

from solkit.harness import correctness as cc
from solkit.problems.schema import ToleranceSpec

TOL = ToleranceSpec()


@pytest.mark.parametrize("shape", [(1,), (7, 13), (3, 1, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_equal_outputs_pass_with_zero_error(shape, dtype):
    r = torch.randn(shape).to(dtype)
    c = cc.compare(r, r.clone(), TOL, 1.0)
    assert c.ok and c.max_absolute_error == 0 and c.mismatches == 0 and c.matched_ratio == 1.0


def test_one_bad_element_fails_by_default_but_passes_with_ratio():
    r = torch.randn(1000)
    o = r.clone()
    o[17] += 5.0
    strict = cc.compare(r, o, TOL, cc.required_ratio(TOL))
    assert not strict.ok and strict.status == "INCORRECT_NUMERICAL" and strict.mismatches == 1
    assert math.isclose(strict.max_absolute_error, 5.0, rel_tol=1e-6)
    assert cc.compare(r, o, TOL, 0.99).ok  # SOL-ExecBench's 0.99 lets it through


def test_required_ratio_policy():
    assert cc.required_ratio(ToleranceSpec()) == 1.0  # default ratio not explicit -> all elements
    assert cc.required_ratio(ToleranceSpec(required_matched_ratio=0.95)) == 0.95
    assert cc.required_ratio(ToleranceSpec(required_matched_ratio=0.95), override=0.5) == 0.5


def test_rule_is_atol_plus_rtol_times_ref():
    r = torch.tensor([100.0, 0.0])
    tol = ToleranceSpec(max_atol=0.01, max_rtol=0.01)
    assert cc.compare(r, torch.tensor([101.0, 0.01]), tol, 1.0).ok  # 1 <= 0.01 + 1; 0.01 <= 0.01
    assert not cc.compare(r, torch.tensor([101.02, 0.0]), tol, 1.0).ok
    assert not cc.compare(r, torch.tensor([100.0, 0.0101]), tol, 1.0).ok


def test_max_error_cap():
    r = torch.zeros(100)
    o = r.clone()
    o[0] = 0.5
    tol = ToleranceSpec(max_error_cap=0.1, required_matched_ratio=0.9)
    c = cc.compare(r, o, tol, cc.required_ratio(tol))
    assert not c.ok and "max_error_cap" in c.reason


def test_nan_and_inf_handling():
    r = torch.tensor([1.0, float("-inf"), float("inf"), 2.0])
    same = cc.compare(r, r.clone(), TOL, 1.0)
    assert same.ok and not same.has_inf  # matching infinities are fine
    o = r.clone()
    o[0] = float("nan")
    bad = cc.compare(r, o, TOL, 0.5)
    assert not bad.ok and bad.has_nan and "NaN" in bad.reason  # NaN fails whatever the ratio
    o = r.clone()
    o[3] = float("inf")
    assert cc.compare(r, o, TOL, 0.5).has_inf
    o = r.clone()
    o[1] = float("inf")  # wrong-signed infinity
    assert not cc.compare(r, o, TOL, 1.0).ok
    assert cc.reference_problem({"y": torch.tensor([1.0, float("nan")])})
    assert cc.reference_problem({"y": r}) is None


def test_shape_and_dtype_and_structure():
    r = torch.randn(4, 5)
    assert cc.compare(r, r.t(), TOL, 1.0).status == "INCORRECT_SHAPE"
    assert cc.compare(r, r.double(), TOL, 1.0).status == "INCORRECT_DTYPE"
    assert cc.compare(r, "nope", TOL, 1.0).status == "INCORRECT_SHAPE"
    assert cc.normalize_outputs(r, ["y"]) == {"y": r}
    assert set(cc.normalize_outputs((r, r), ["a", "b"])) == {"a", "b"}
    assert cc.normalize_outputs({"b": 1, "a": 2}, ["a", "b"]) == {"a": 2, "b": 1}
    for bad, names in (((r,), ["a", "b"]), (r, ["a", "b"]), (None, ["a"]), ({"a": r}, ["a", "b"])):
        with pytest.raises(cc.OutputFormatError):
            cc.normalize_outputs(bad, names)


def test_integer_and_scalar_outputs():
    r = torch.arange(10)
    assert cc.compare(r, r.clone(), ToleranceSpec(max_atol=0, max_rtol=0), 1.0).ok
    assert not cc.compare(r, r + 1, ToleranceSpec(max_atol=0, max_rtol=0), 1.0).ok
    assert cc.compare(3.0, 3.001, TOL, 1.0).ok


def test_constant_and_bitwise_helpers():
    assert cc.is_constant(torch.zeros(3, 3)) and cc.is_constant(torch.full((4,), float("nan")))
    assert not cc.is_constant(torch.arange(4.0)) and not cc.is_constant(torch.zeros(1))
    a = torch.tensor([1.0, float("nan")])
    assert cc.bitwise_equal(a, a.clone()) and not cc.bitwise_equal(a, torch.tensor([1.0, 2.0]))
    assert not cc.bitwise_equal(a, a.double())


def test_merge_keeps_worst_and_first_failure():
    ok = cc.OutputCheck(max_absolute_error=0.1, numel=10)
    bad = cc.OutputCheck(False, "INCORRECT_NUMERICAL", "x", max_absolute_error=0.05, mismatches=2, numel=10)
    m = ok.merge(bad)
    assert not m.ok and m.reason == "x" and m.max_absolute_error == 0.1 and m.mismatches == 2 and m.numel == 20


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sliced_cpu_comparison_matches_the_whole_tensor_one(monkeypatch, dtype):
    # a CPU output above one slice is compared slice by slice: the same matches, maxima and flags as in one piece
    n = 3 * cc.CPU_SLICE + 12345
    r = torch.randn(n).to(dtype)
    o = (r.double() + 1e-3 * torch.randn(n)).to(dtype)
    o[5] = float("nan")
    r[cc.CPU_SLICE + 7], o[cc.CPU_SLICE + 7] = float("inf"), float("inf")  # a matching infinity
    o[2 * cc.CPU_SLICE + 1] = float("-inf")  # where the reference is finite
    o[n - 1] += 4.0
    sliced = cc.compare(r, o, TOL, 0.5, "y")
    monkeypatch.setattr(cc, "CPU_SLICE", 1 << 40)
    whole = cc.compare(r, o, TOL, 0.5, "y")
    for field in ("ok", "status", "reason", "mismatches", "numel", "has_nan", "has_inf", "max_absolute_error",
                  "max_relative_error"):  # fmt: skip
        assert getattr(sliced, field) == getattr(whole, field), field
    assert sliced.l2_relative_error == pytest.approx(whole.l2_relative_error, rel=1e-9)


def test_sliced_precision_check_matches_the_whole_tensor_one(monkeypatch):
    from solkit.harness import anticheat as ac

    n = 2 * cc.CPU_SLICE + 99
    ref64 = torch.randn(n, dtype=torch.float64)
    ref, cand = ref64.to(torch.bfloat16), (ref64 + 0.05 * torch.randn(n, dtype=torch.float64)).to(torch.bfloat16)
    sliced = ac.precision(ref, ref64, cand, torch.bfloat16)
    monkeypatch.setattr(cc, "CPU_SLICE", 1 << 40)
    whole = ac.precision(ref, ref64, cand, torch.bfloat16)
    assert sliced["downgraded"] and whole["downgraded"]  # errors of 0.05: far less precise than bf16
    for key in ("reference_error", "candidate_error", "limit"):
        assert sliced[key] == pytest.approx(whole[key], rel=1e-9)
