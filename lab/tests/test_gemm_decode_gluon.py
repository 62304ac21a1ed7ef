"""lab.kernels.gemm_decode_gluon (the swap-AB Gluon decode kernel, M <= 64; a lab experiment no dispatcher reaches).

CPU: Gluon does not run in Triton's interpreter, so the CPU tests check what can be checked there: the
rules, the grid arithmetic, and that the kernel compiles for sm_90.
GPU (marked): bf16 values at M = 1 / 5 / 16 / 64 with odd N and K, whole-tile and split (stream-K) grids, bias and
SiLU, repeated calls and CUDA-graph replays (the workspace and counters must come back to zero), ``supports`` for
operands TMA cannot address.
"""

from __future__ import annotations

import pytest
import torch
from gemm_decode_helpers import check_decode as _check
from gemm_decode_helpers import decode_case as _case
from lab.kernels import gemm_decode_gluon as D

GLUON = D._IMPORT_ERROR is None


# ------------------------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize(("m", "mp"), [(1, 8), (5, 8), (8, 8), (9, 16), (16, 16), (17, 32), (33, 64), (64, 64)])
def test_padded_m(m, mp):
    assert D.padded_m(m) == mp


def test_program_count_caps_at_units():
    cfg = D.DecodeGluonConfig(bw=128, ksub=2, bk=64, ctas_per_sm=2)
    assert D.program_count(cfg, 4096, 4096, 132) == 264  # 32 row tiles x 32 units each: 1024 units
    assert D.program_count(cfg, 128, 128, 132) == 1  # one unit
    assert D.program_count(D.DecodeGluonConfig(grid=128), 4096, 4096, 132) == 128


def test_rules_match_by_range():
    rules = [{"m_max": 1, "k_max": 4096, "config": {"bw": 64, "ksub": 4, "stages": 5}},
             {"m_min": 2, "m_max": 16, "config": {"bw": 128}}]  # fmt: skip
    assert D.rule_for(rules, 1, 4096, 4096) == D.DecodeGluonConfig(bw=64, ksub=4, stages=5)
    assert D.rule_for(rules, 1, 8192, 8192) is None
    assert D.rule_for(rules, 16, 8192, 8192) == D.DecodeGluonConfig(bw=128)
    assert D.rule_for(rules, 64, 4096, 4096) is None
    assert D.rule_for(None, 1, 4096, 4096) is None


def test_supports():
    x, w, r, _ = _case(4, 64, 256, torch.float16, "cpu")
    assert D.supports(x, w, r)
    assert not D.supports(x.float(), w.float(), r.float())  # fp32: not a wgmma bf16/fp16 path
    x65, _, _, _ = _case(65, 64, 256, torch.float16, "cpu")
    assert not D.supports(x65, w)  # M > 64
    xo, wo, _, _ = _case(4, 64, 37, torch.float16, "cpu")
    assert not D.supports(xo, wo)  # rows of 74 bytes: TMA cannot address them


def test_unavailable_on_cpu():
    assert D.unavailable_reason() is not None


def test_gemm_never_reaches_it():
    """No dispatcher reaches the lab kernel: the product's decode path on the CPU is a product Triton kernel (the
    portable pointer kernel: the interpreter meets no other path)."""
    from solkit.kernels.gemm import dispatch as G

    x, w, r, _ = _case(1, 64, 128, torch.float16, "cpu")
    y = G.gemm(x, w, residual=r)
    assert G.LAST_LAUNCH["kernel"] in G.KERNELS
    torch.testing.assert_close(y.float(), G.reference(x, w, None, r), atol=2e-3, rtol=2e-3)


_COMPILE_SCRIPT = """
import json
from lab.kernels import gemm_decode_gluon as D
out = []
for fields, m in [({}, 1), ({"bw": 64, "ksub": 4, "stages": 5}, 16), ({"bw": 128, "stages": 4, "warps": 8}, 64),
                  ({"no_math": 2}, 1)]:
    k = D.compile_sm90(D.DecodeGluonConfig(**fields), m=m, has_bias=True, act=1)
    ptx = k.asm["ptx"]
    out.append({"shared": k.metadata.shared, "tma": "cp.async.bulk.tensor.2d" in ptx, "wgmma": "wgmma.mma_async" in ptx,
                "no_math": fields.get("no_math", 0)})
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(not GLUON, reason="triton.experimental.gluon not importable")
def test_compiles_for_sm90():
    """The kernel compiles for sm_90 without a GPU; the ring fits in shared memory; the stream issues wgmmas. In a
    fresh process without TRITON_INTERPRET: the interpreter's patches of triton.language (left by other tests in
    this process) break Gluon's code generation."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-2000:]
    for r in json.loads(line[len("RESULT ") :]):
        assert r["shared"] <= D.SMEM_LIMIT
        assert r["tma"]
        assert r["wgmma"] == (r["no_math"] == 0)


# ------------------------------------------------------------------------------------------------ GPU
GPU_CONFIGS = {
    "default": D.DecodeGluonConfig(),
    "bw64_k4": D.DecodeGluonConfig(bw=64, ksub=4, stages=5),
    "two_per_sm": D.DecodeGluonConfig(bw=128, ksub=2, stages=3, ctas_per_sm=2),
    "whole_tiles": D.DecodeGluonConfig(bw=64, ksub=2, stages=4, grid=8),  # every program owns whole row tiles
    "w8_no_pre": D.DecodeGluonConfig(bw=128, ksub=1, stages=4, warps=8, pre_res=0),
    "producer_warp": D.DecodeGluonConfig(bw=128, ksub=2, stages=3, ctas_per_sm=2, ws=1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_CONFIGS))
@pytest.mark.parametrize(("M", "N", "K"), [(1, 4096, 4096), (5, 1000, 4000), (16, 1000, 4096), (64, 4096, 4000)])
def test_bf16_values(name, M, N, K):
    cfg = GPU_CONFIGS[name]
    if cfg.smem_bytes(D.padded_m(M)) > D.SMEM_LIMIT:
        pytest.skip("ring too deep for this M")
    x, w, r, _ = _case(M, N, K, torch.bfloat16, "cuda", seed=M + N)
    for _ in range(2):  # the second call finds the workspace and counters the first left (zero)
        y = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        D.gemm_decode_gluon(x, w, residual=r, config=cfg, out=y)
        torch.cuda.synchronize()
        _check(y, x, w, r)


@pytest.mark.gpu
def test_bf16_bias_silu_alpha_beta():
    x, w, r, b = _case(3, 1000, 4096, torch.bfloat16, "cuda", seed=3, bias=True)
    cfg = D.DecodeGluonConfig(bw=64, ksub=2, stages=6)
    y = D.gemm_decode_gluon(x, w, b, r, activation="silu", alpha=0.5, beta=2.0, config=cfg)
    _check(y, x, w, r, b, activation="silu", alpha=0.5, beta=2.0)


@pytest.mark.gpu
def test_unaligned_rows_not_supported():
    """K = 4001 (rows not 16-byte aligned): TMA cannot address x and W."""
    x, w, r, _ = _case(1, 512, 4001, torch.bfloat16, "cuda", seed=9)
    assert not D.supports(x, w, r)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 64])
def test_bf16_cuda_graph_replay(M):
    """Captured once, replayed on new inputs copied into the captured buffers (output poisoned each time)."""
    cfg = D.DecodeGluonConfig(bw=128, ksub=2, stages=4)
    x, w, r, _ = _case(M, 2048, 4096, torch.bfloat16, "cuda", seed=11)
    D.gemm_decode_gluon(x, w, residual=r, config=cfg)  # warm-up: compiles, allocates the workspace
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        y = D.gemm_decode_gluon(x, w, residual=r, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    for seed in (12, 13):
        x2, w2, r2, _ = _case(M, 2048, 4096, torch.bfloat16, "cuda", seed=seed)
        x.copy_(x2)
        w.copy_(w2)
        r.copy_(r2)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(y, x, w, r)
