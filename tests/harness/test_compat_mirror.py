"""SOL-ExecBench's own test samples (tests/sol_execbench/samples), unedited, from a local mirror of its repository.

Skipped without the mirror (``$SOLKIT_SOL_EXECBENCH_MIRROR``, default the fetched bare git directory). Every sample
loads; the ones a CPU can run get the statuses SOL-ExecBench's tests expect (PASSED, and REWARD_HACK for the
``evil_*`` samples on the problem its test_e2e.py puts them on). The whole sweep, GPU cases included, is
benchmarks/sol_execbench_compat.py.
"""

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from harness_helpers import fast_options

from solkit.harness.evaluate import evaluate
from solkit.problems import load_problem

MIRROR = Path(os.environ.get("SOLKIT_SOL_EXECBENCH_MIRROR", "/work/.mirror/NVIDIA+SOL-ExecBench/repo"))
pytestmark = pytest.mark.skipif(not (MIRROR.is_dir() and shutil.which("git")), reason=f"no mirror at {MIRROR}")
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sol_execbench_compat.py"
CPU_CASES = [
    ("custom_inputs_matmul", "solution_python.json", "PASSED"),
    ("linear_backward", "solution_python.json", "PASSED"),
    ("triton_ref_vecadd", "solution_python.json", "PASSED"),
    ("evil_lazy_output", "solution.json", "REWARD_HACK"),
    ("evil_monkey_patch", "solution.json", "REWARD_HACK"),
    ("evil_thread_inject", "solution.json", "REWARD_HACK"),
]


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("sol_execbench_compat", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    root = tmp_path_factory.mktemp("sxb")
    script._git_tree(MIRROR, ["tests/sol_execbench/samples"], root)
    out = root / "tests" / "sol_execbench" / "samples"
    for evil in out.glob("evil_*"):
        script._evil_problem(evil)
    return out


def test_every_sample_loads(samples):
    dirs = sorted(p.parent for p in samples.rglob("definition.json"))
    assert len(dirs) >= 12 and any(d.name == "gqa_paged_decode" for d in dirs)
    for d in dirs:
        p = load_problem(d)  # gqa_paged_decode's kv_indptr[-1].item() constraint included
        assert p.workloads, d


@pytest.mark.parametrize("sample,solution,status", CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_sample_gets_the_status_sol_execbench_expects(samples, sample, solution, status):
    d = samples / sample
    traces = evaluate(d, d / solution, fast_options(device="cpu", max_workloads=2))
    assert [t.evaluation.status.value for t in traces] == [status] * len(traces), traces[0].evaluation.log[:300]
