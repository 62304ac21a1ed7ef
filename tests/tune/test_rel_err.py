"""The correctness gate's error measure, computed a slice at a time, equals the whole-tensor fp64 one."""

import math

import pytest
import torch

from solkit.tune import engine as E


def _whole(out, ref):
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return (out - ref).abs().max().item() / (ref.abs().max().item() or 1.0)


@pytest.mark.parametrize("case", ["plain", "nan_out", "inf_out", "nan_ref", "zero_ref", "one_slice"])
def test_sliced_rel_err_matches_whole_tensor(case, monkeypatch):
    monkeypatch.setattr(E, "_ERR_CHUNK", 1000 if case == "one_slice" else 7)  # many slices, and an odd tail
    g = torch.Generator().manual_seed(len(case))
    ref = torch.randn(5, 13, generator=g) * 30
    out = (ref + torch.randn(5, 13, generator=g) * 0.01).half()
    if case == "nan_out":
        out[3, 11] = float("nan")
    if case == "inf_out":
        out[0, 0] = float("inf")
    if case == "nan_ref":
        ref[4, 2] = float("nan")
    if case == "zero_ref":
        ref.zero_()
    got, want = E._rel_err(out, ref), _whole(out, ref)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=0)
    if case in ("nan_out", "inf_out"):
        assert got == float("inf")
    if case == "nan_ref":
        assert not got <= 1.0  # never passes the gate
    assert E._rel_err(out, ref[:, :12]) == float("inf")  # shape mismatch
