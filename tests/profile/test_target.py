"""Loading what gets profiled: references, solution files and `solkit bench` backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from solkit.errors import SolkitError
from solkit.profile.target import load_target

ROOT = Path(__file__).resolve().parents[2]
SUITE_RMS = ROOT / "src" / "solkit" / "problems" / "suite" / "rmsnorm"
TINY = Path(__file__).parent / "problems" / "tiny_rmsnorm"


def test_reference_and_py_solution_agree_on_the_tiny_problem():
    ref = load_target(TINY, "tiny-m5", None, "cpu")
    sol = load_target(TINY, "tiny-m5", TINY / "solution_torch.py", "cpu")
    assert ref.kind == "reference" and sol.kind == "solution"
    assert ref.model_source == "solkit.sol.analysis" and ref.model_bytes == (5 * 64 * 2 + 64) * 4
    assert ref.model_unfused_bytes > ref.model_bytes
    torch.testing.assert_close(sol.fn(*sol.args), ref.fn(*ref.args), rtol=1e-5, atol=1e-5)


def test_bench_backend_as_a_solution():
    t = load_target(SUITE_RMS, "eb612a59", "bench:eager", "cpu", label="rmsnorm.eager")
    out = t.fn(*t.args)
    assert out.shape == (16, 4096) and out.dtype == torch.bfloat16
    with pytest.raises(SolkitError, match="unknown bench backend"):
        load_target(SUITE_RMS, "eb612a59", "bench:nope", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(SolkitError, match="CUDA"):
            load_target(SUITE_RMS, "eb612a59", "bench:solkit", "cpu")
