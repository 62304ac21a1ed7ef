"""solkit's own example problems (SOL-ExecBench layout) evaluate cleanly; traces validate."""

import json

import pytest
import torch
from harness_helpers import EXAMPLES, fast_options, small_workloads

from solkit.harness.evaluate import evaluate, traces_to_jsonl
from solkit.problems.schema import Trace

# The Triton interpreter on the CPU misreads bf16 (see the brief), so bf16 Triton runs on the GPU only.
CPU_OK = {
    ("gather_rows", "solution_pytorch.json"),
    ("gelu_add", "solution_pytorch.json"),
    ("gelu_add", "solution_triton.json"),
    ("gemm", "solution_pytorch.json"),
    ("rmsnorm", "solution_pytorch.json"),
}
PAIRS = sorted((p.parent.name, p.name) for p in EXAMPLES.glob("*/solution*.json"))


@pytest.mark.parametrize("problem,solution", PAIRS)
def test_example_solution_passes(problem, solution):
    if (problem, solution) not in CPU_OK and not torch.cuda.is_available():
        pytest.skip("bf16 Triton needs a GPU")
    d = EXAMPLES / problem
    traces = evaluate(d, d / solution, fast_options(workloads=small_workloads(d)))
    for t in traces:
        e = t.evaluation
        assert e.status.value == "PASSED", e.log
        assert e.correctness.extra["matched_ratio"] == 1.0 and e.correctness.extra["trials"] >= 3
        assert e.performance.latency_ms > 0 and e.performance.timing["reps"] >= 1
        assert e.environment.seed == 200 and e.environment.libs["torch"] == torch.__version__
        methods = ("wall", "cupti_kernel_span", "cuda_events", "cuda_graph", "cuda_graph_events")
        assert e.environment.timing_method in methods
    for line in traces_to_jsonl(traces).splitlines():  # the written form parses back
        Trace.model_validate(json.loads(line))


def test_reference_against_itself_and_sol_note():
    d = EXAMPLES / "gemm"
    traces = evaluate(d, None, fast_options(workloads=small_workloads(d)))
    assert [t.evaluation.status.value for t in traces] == ["PASSED", "PASSED"]
    t = traces[0]
    assert t.solution == "gemm_bf16__reference" and t.evaluation.correctness.max_absolute_error == 0.0
    if not torch.cuda.is_available():
        assert "SOL skipped" in t.evaluation.solkit["sol"]


@pytest.mark.parametrize("shape", [(64, 96, 128), (33, 65, 127), (1030, 1100, 70)])
def test_triton_gemm_example_kernel_logic_in_fp16(shape):
    """The bf16 Triton GEMM example through the CPU interpreter in fp16 (bf16 is misread there): both tile configs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_example", EXAMPLES / "gemm" / "kernel_triton.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    M, N, K = shape
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(M, K, dtype=torch.float16, device=dev)
    b = torch.randn(K, N, dtype=torch.float16, device=dev)
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device=dev)
    mod.run(a, b, c)
    ref = a.float() @ b.float()
    assert not torch.isnan(c).any()
    assert float((c.float() - ref).abs().max()) <= 0.02 + 1e-3 * float(ref.abs().max())
