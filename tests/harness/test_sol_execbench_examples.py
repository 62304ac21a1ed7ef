"""SOL-ExecBench's own public examples, unedited, from a local mirror of NVIDIA/SOL-ExecBench.

The mirror is a bare git directory (``$SOLKIT_SOL_EXECBENCH_MIRROR``, default the fetched
``/work/.mirror/NVIDIA+SOL-ExecBench/repo``); the test is skipped when it is absent. Their files are
read with ``git show`` into a temporary directory and evaluated as they are: the pytorch solutions on
the CPU, the triton ones too on a GPU (the CPU Triton interpreter misreads bf16).
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from harness_helpers import fast_options

from solkit.harness.evaluate import evaluate
from solkit.problems import load_problem, load_solution

MIRROR = Path(os.environ.get("SOLKIT_SOL_EXECBENCH_MIRROR", "/work/.mirror/NVIDIA+SOL-ExecBench/repo"))
HAVE = MIRROR.is_dir() and shutil.which("git") is not None
pytestmark = pytest.mark.skipif(not HAVE, reason=f"no SOL-ExecBench mirror at {MIRROR}")


def _git(*args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(MIRROR), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sol_execbench_examples")
    for path in _git("ls-tree", "-r", "--name-only", "HEAD", "examples").split():
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(subprocess.run(["git", "--git-dir", str(MIRROR), "show", f"HEAD:{path}"], check=True,
                                        capture_output=True).stdout)  # fmt: skip
    return root / "examples"


def test_every_example_problem_and_solution_loads(examples):
    dirs = sorted(p.parent for p in examples.rglob("definition.json"))
    assert len(dirs) >= 8
    for d in dirs:
        p = load_problem(d)
        assert p.workloads, d
        for w in p.workloads:
            assert p.input_shapes(w) and p.output_shapes(w)
        for s in d.glob("solution*.json"):
            assert load_solution(s).definition == p.name


# gemma3_swiglu is a 3072x24576 bf16 projection: on the CPU one workload with one trial is kept short.
CASES = [
    ("pytorch/linear_backward", "solution_python.json", {}),
    (
        "pytorch/gemma3_swiglu",
        "solution_python.json",
        {
            "max_workloads": 1,
            "trials": 1,
            "timing_trials": 1,
            "warmup": 0,
            "precision_check": False,
            "benchmark_reference": False,
        },
    ),  # fmt: skip
    ("triton/rmsnorm", "solution_triton.json", {"max_workloads": 3}),
    ("triton/nemotron_rms_norm", "solution_triton.json", {}),
    ("triton/olmo3_post_norm", "solution_triton.json", {}),
]


@pytest.mark.parametrize(
    "problem,solution,over",
    # gemma3_swiglu's fp32 reference alone takes ~15 s on a 2-core CPU: in the `slow` set (.ci/run runs it if time
    # allows)
    [pytest.param(*c, marks=pytest.mark.slow) if c[0].endswith("gemma3_swiglu") else c for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_example_passes(examples, problem, solution, over):
    if "triton" in problem and not torch.cuda.is_available():
        pytest.skip("bf16 Triton solutions need a GPU (the CPU interpreter misreads bf16)")
    if torch.cuda.is_available():
        over = {}
    d = examples / problem
    traces = evaluate(d, d / solution, fast_options(**over))
    assert traces
    for t in traces:
        assert t.evaluation.status.value == "PASSED", f"{problem} {t.workload.uuid}: {t.evaluation.log[:400]}"
