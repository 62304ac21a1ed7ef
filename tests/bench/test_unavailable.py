"""A kernel that cannot serve the device makes its bench row `unavailable: <reason>`; the run goes on (CPU)."""

import pytest

from solkit.backends import BACKENDS
from solkit.backends.registry import Backend
from solkit.bench.runner import BenchConfig, run_workload, select, suite_problems
from solkit.errors import SolkitError
from solkit.kernels.common.capability import Needs, caps_for_product, choose, device_caps, simulate
from solkit.sol.ceilings import spec_ceilings

# A kernel whose fastest path needs TMA and whose portable path needs more shared memory per program than an
# sm_89 part allows: on a simulated RTX 4090 no path runs, and it says so in one line as the dispatchers do.
PATHS = (("tma", Needs(min_cc=(9, 0), tma=True)), ("portable", Needs(smem_bytes=160 * 1024)))


def picky_rmsnorm(x, w):
    try:
        choose(PATHS, device_caps(x))
    except SolkitError as exc:
        raise SolkitError(f"rmsnorm_fwd: {exc}") from None
    return x * w  # never reached on the simulated product


@pytest.fixture
def picky(monkeypatch):
    backend = Backend("picky", "a kernel that serves only parts with TMA or 160 KB of shared memory")
    backend.impls["rmsnorm"] = lambda ref: picky_rmsnorm
    monkeypatch.setitem(BACKENDS, "picky", backend)


def test_row_is_unavailable_with_the_reason_and_the_run_goes_on(picky):
    cfg = BenchConfig(device="cpu", sizes=("s",), ops=("rmsnorm",), backends=("picky", "eager"), reps=1, trials=1)
    problem, workload = select(suite_problems(), cfg)[0]
    with simulate(caps_for_product("rtx-4090")):
        rows = run_workload(problem, workload, cfg, {"spec": spec_ceilings("rtx-4090")})
    picky_row, eager_row = rows
    assert picky_row.status == "unavailable" and picky_row.ms is None
    assert picky_row.error.startswith("rmsnorm_fwd: no path runs on rtx-4090: tma: needs sm_90")
    assert "\n" not in picky_row.error and "shared memory" in picky_row.error
    assert eager_row.status == "ok" and eager_row.ms > 0


def test_same_kernel_runs_where_a_path_fits(picky):
    # An A100 allows 163 KB per program: TMA is skipped, the portable path fits and runs.
    caps = caps_for_product("a100-sxm4-80gb")
    cfg = BenchConfig(device="cpu", sizes=("s",), ops=("rmsnorm",), backends=("picky",), reps=1, trials=1)
    problem, workload = select(suite_problems(), cfg)[0]
    with simulate(caps):
        (row,) = run_workload(problem, workload, cfg, {"spec": spec_ceilings("a100-sxm4-80gb")})
    assert row.status != "unavailable"
