"""GPU-only checks of the real engine path (compile pool + CUDA timing); skipped without a GPU."""

import pytest
import torch

from solkit.tune import bench_kernels as bk
from solkit.tune.records import BenchSettings
from solkit.tune.space import Space, gemm_smem_bytes, smem_limit
from solkit.tune.tuner import tune

SMALL_GEMM = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "GROUP_M": [8],
              "num_warps": [4], "num_stages": [3]}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("isolate", [False, True])
def test_gemm_tunes_with_the_compile_pool(isolate):
    problem = bk.make_gemm_problem(384, 256, 320, torch.bfloat16)  # odd-ish multiples of 16 and 64
    space = Space(SMALL_GEMM, smem_bytes=gemm_smem_bytes(2), smem_limit_bytes=smem_limit())
    res = tune(problem, space, strategy="exhaustive", budget=len(space), isolate=isolate,
               settings=BenchSettings(reps=5, trials=1))  # fmt: skip
    assert res.statuses == {"ok": len(space)}
    assert res.best in space.configs and res.best_ms > 0
    assert all(e.get("n_regs", 0) > 0 for e in res.evaluations)  # compiled and loaded by pool workers


@pytest.mark.gpu
def test_out_of_resources_is_classified_not_raised():
    problem = bk.make_gemm_problem(256, 256, 256, torch.bfloat16)
    space = Space(
        {"BLOCK_M": [256], "BLOCK_N": [256], "BLOCK_K": [128], "GROUP_M": [8], "num_warps": [8], "num_stages": [2, 6]}
    )  # 6 stages of 256x256x128 tiles cannot fit any GPU's shared memory
    res = tune(problem, space, strategy="exhaustive", budget=2, settings=BenchSettings(reps=3, trials=1))
    statuses = {e["config"]["num_stages"]: e["status"] for e in res.evaluations}
    assert statuses[6] in ("out_of_resources", "compile_error")  # Triton may refuse it before loading
    assert res.best is None or res.best["num_stages"] == 2
