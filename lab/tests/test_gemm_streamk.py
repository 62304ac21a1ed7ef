"""lab.kernels.gemm_streamk: the stream-K persistent GEMM, against an fp32 reference.

On the CPU the kernel runs through Triton's interpreter (fp32/fp16, small odd shapes) with a few
programs, so that the stream-K ranges cut tiles in every way: a tile shared by two or three programs,
programs with an empty range, more programs than tiles. bf16 at real sizes, and CUDA-graph replay,
are marked gpu.
"""

from __future__ import annotations

import pytest
import torch
from lab.kernels import gemm_streamk as SK

from solkit.kernels.gemm import dispatch as G

SMALL = {**SK.INTERPRETER_CONFIG, "FLATTEN": True, "SK_WAVES": 1}
ATOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _case(M, N, K, dtype, device, seed, bias=True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(device, dtype)
    w = (torch.randn(N, K, generator=gen) / K**0.5).to(device, dtype)
    b = torch.randn(N, generator=gen).to(device, dtype) if bias else None
    r = torch.randn(M, N, generator=gen).to(device, dtype)
    return x, w, b, r


def _check(y, x, w, b, r, dtype, **kw):
    """Max error at most 2x torch's own in the same dtype (F.linear + epilogue) plus a small atol."""
    ref = G.reference(x, w, b, r, **kw)
    z = torch.nn.functional.linear(x, w, b)
    if kw.get("activation") == "silu":
        z = torch.nn.functional.silu(z)
    same = z * kw.get("alpha", 1.0) + r * kw.get("beta", 1.0)
    assert torch.isfinite(y).all(), "non-finite output (a tile left unwritten?)"
    err = (y.float() - ref).abs().max().item()
    budget = 2 * (same.float() - ref).abs().max().item() + ATOL[dtype]
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


def _covers_once(M, N, K, cfg, programs):
    """Host model of the kernel's ranges: every (tile, k) iteration of the stream-K tiles exactly once."""
    s = SK.schedule(M, N, K, cfg, programs)
    starts = [p * s["iters_per"] + min(p, s["extra"]) for p in range(programs + 1)]
    assert starts[-1] == s["sk_tiles"] * s["k_tiles"]
    assert all(b - a in (s["iters_per"], s["iters_per"] + 1) for a, b in zip(starts, starts[1:]))
    return s


@pytest.mark.parametrize(
    ("M", "N", "K", "programs", "waves", "expect_sk"),
    [
        (130, 64, 80, 3, 1, 1),  # 10 tiles on 3 programs: the 10th tile is split three ways
        (130, 64, 80, 3, 2, 4),  # and one full wave before it
        (130, 64, 80, 5, 1, 0),  # 10 tiles on 5: whole waves, no stream-K
        (17, 48, 64, 5, 1, 2),  # fewer tiles than programs: all stream-K, 8 iterations over 5 programs
        (130, 96, 48, 7, 1, 1),  # 15 tiles on 7: 3 iterations over 7 programs (four get none)
    ],
)
def test_schedule(M, N, K, programs, waves, expect_sk):
    s = _covers_once(M, N, K, {**SMALL, "SK_WAVES": waves}, programs)
    assert s["sk_tiles"] == expect_sk
    assert (s["tiles"] - s["sk_tiles"]) % programs == 0, "the data-parallel tiles must be whole waves"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("M", "N", "K", "programs", "waves", "subtile", "prefetch"),
    [
        (130, 64, 80, 3, 1, 2, 0),
        (130, 64, 80, 3, 2, 4, 4),
        (17, 48, 64, 5, 1, 1, 0),
        (65, 64, 160, 7, 2, 2, 1),
        (130, 96, 48, 7, 1, 2, 4),
        (130, 64, 80, 5, 0, 2, 0),  # SK_WAVES 0: the data-parallel half alone
    ],
)
def test_values_interpreter(dtype, M, N, K, programs, waves, subtile, prefetch, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("interpreter case (the GPU runs the gpu tests below)")
    monkeypatch.setattr(SK, "INTERPRETER_PROGRAMS", programs)
    x, w, b, r = _case(M, N, K, dtype, "cpu", seed=M + N + K)
    kw = dict(alpha=0.5, beta=-2.0, activation="silu")
    cfg = {**SMALL, "SK_WAVES": waves, "EPI_SUBTILE": subtile, "PREFETCH_RES": prefetch, "PF_DIST": 2}
    y = torch.full((M, N), float("nan"), dtype=dtype)
    SK.gemm_streamk(x, w, b, r, config=cfg, out=y, **kw)
    _check(y, x, w, b, r, dtype, **kw)
    ws, counters = SK.SCRATCH["cpu"]
    assert int(counters.abs().sum()) == 0, "tile counters must be back at zero after the call"


@pytest.mark.parametrize(
    ("activation", "alpha", "beta", "waves"),
    [("none", 0.5, -2.0, 1), ("none", 1.0, 1.0, 2), ("silu", 0.5, -2.0, 1), ("none", 0.0, 3.0, 1)],
)
def test_residual_in_accumulator_interpreter(activation, alpha, beta, waves, monkeypatch):
    """PREFETCH_RES 6: the accumulator starts as residual * beta / alpha (only the piece holding k = 0 of
    a cut tile reads it); with an activation the epilogue adds the residual instead, and alpha = 0 is
    done without the fold."""
    if torch.cuda.is_available():
        pytest.skip("interpreter case")
    monkeypatch.setattr(G, "INTERPRETER_PROGRAMS", 3)
    x, w, b, r = _case(130, 64, 80, torch.float32, "cpu", seed=5)
    kw = dict(alpha=alpha, beta=beta, activation=activation)
    y = SK.gemm_streamk(x, w, b, r, config={**SMALL, "SK_WAVES": waves, "PREFETCH_RES": 6}, **kw)
    _check(y, x, w, b, r, torch.float32, **kw)


@pytest.mark.parametrize("waves", [1, 2])
def test_two_programs_per_sm_interpreter(waves, monkeypatch):
    """PROGS_PER_SM 2: the grid and the schedule double (3 'SMs' -> 6 programs), the workspace with them."""
    if torch.cuda.is_available():
        pytest.skip("interpreter case")
    monkeypatch.setattr(G, "INTERPRETER_PROGRAMS", 3)
    cfg = {**SMALL, "SK_WAVES": waves, "PROGS_PER_SM": 2}
    x, w, b, r = _case(130, 96, 80, torch.float16, "cpu", seed=9)
    y = SK.gemm_streamk(x, w, b, r, config=cfg)
    _check(y, x, w, b, r, torch.float16)
    assert _covers_once(130, 96, 80, cfg, 6)["sk_tiles"] > 0
    assert SK.SCRATCH["cpu"][0].numel() >= 6 * 2 * 32 * 32


def test_reuse_and_determinism_interpreter(monkeypatch):
    """Two calls reuse the workspace (no reset between them: the counters are reset in-kernel), and a cut
    tile's pieces are summed in program order, so repeated calls agree bit for bit."""
    if torch.cuda.is_available():
        pytest.skip("interpreter case")
    monkeypatch.setattr(G, "INTERPRETER_PROGRAMS", 3)
    cfg = {**SMALL, "SK_WAVES": 2}
    first = None
    for seed in (1, 2, 2):
        x, w, b, r = _case(130, 64, 80, torch.float32, "cpu", seed=seed, bias=False)
        y = SK.gemm_streamk(x, w, residual=r, config=cfg)
        _check(y, x, w, None, r, torch.float32)
        if seed == 2:
            if first is None:
                first = y
            else:
                assert torch.equal(first, y)


def test_streamk_needs_tma_alignment():
    x = torch.randn(40, 30)  # 30 * 4 bytes: rows not 16-byte aligned
    w = torch.randn(32, 30)
    if torch.cuda.is_available():
        x, w = x.cuda().half(), w.cuda().half()
    with pytest.raises(Exception, match="TMA-aligned"):
        SK.gemm_streamk(x, w, config=SMALL)


def test_workspace_grows_and_keeps_old_buffers():
    dev = torch.device("cpu")
    SK.SCRATCH.pop(str(dev), None)
    ws, cnt = SK.workspace(dev, 4, [SMALL])
    assert ws.numel() == 4 * 2 * 32 * 32 and cnt.numel() == 4 and int(cnt.abs().sum()) == 0
    ws2, cnt2 = SK.workspace(dev, 4, [{**SMALL, "SK_WAVES": 2}])
    assert cnt2.numel() == 8 and ws2.numel() == ws.numel()
    assert any(t is cnt for t in SK.OUTGROWN), "an outgrown buffer may be referenced by a captured graph"
    assert SK.workspace(dev, 4, [SMALL])[1] is cnt2  # no regrowth for a smaller need


# --------------------------------------------------------------------------------------------- GPU only
def _hopper_streamk_configs():
    picked: dict[tuple, dict] = {}  # one per (tile, SK_WAVES, residual mode, programs per SM): each its own code path
    for c in SK.SWEPT_CONFIGS:
        key = (
            c["BLOCK_M"],
            c["BLOCK_N"],
            c.get("SK_WAVES", 1),
            c.get("PREFETCH_RES", 0) == 6,
            c.get("PROGS_PER_SM", 1),
        )
        picked.setdefault(key, c)
    return list(picked.values())


@pytest.mark.gpu
@pytest.mark.parametrize("M", [4095, 1000, 129])
def test_bf16_odd_m_hopper(M):
    """Real tiles and 132 programs at M not a multiple of 128: stream-K tiles at the ragged edge."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("Hopper path")
    for cfg in _hopper_streamk_configs():
        x, w, b, r = _case(M, 4096, 4096, torch.bfloat16, "cuda", seed=M, bias=False)
        y = torch.full((M, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
        SK.gemm_streamk(x, w, residual=r, config=cfg, out=y)
        _check(y, x, w, None, r, torch.bfloat16)


@pytest.mark.gpu
def test_bf16_cuda_graph_replay():
    """Captured once, replayed on new inputs: the workspace and counters need no reset between replays."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("Hopper path")
    cfg = _hopper_streamk_configs()[0]
    x, w, _, r = _case(1000, 4096, 4096, torch.bfloat16, "cuda", seed=7, bias=False)
    SK.gemm_streamk(x, w, residual=r, config=cfg)  # compile and allocate the workspace outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = SK.gemm_streamk(x, w, residual=r, config=cfg)
    for seed in (8, 9):
        x2, w2, _, r2 = _case(1000, 4096, 4096, torch.bfloat16, "cuda", seed=seed, bias=False)
        x.copy_(x2)
        w.copy_(w2)
        r.copy_(r2)
        graph.replay()
        torch.cuda.synchronize()
        _check(y, x, w, None, r, torch.bfloat16)


_AOT_SCRIPT = """
import json
from lab.kernels import gemm_streamk as SK
base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "EPI_SUBTILE": 2,
        "num_warps": 8, "num_stages": 3}
out = []
for extra, act in [({"SK_WAVES": 1, "PREFETCH_RES": 4, "PF_DIST": 8}, "gelu_tanh")]:
    k = SK.compile_for(90, {**base, **extra}, activation=act)
    out.append([k.metadata.shared, "wgmma" in k.asm["ptx"], "atom" in k.asm["ptx"]])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_compiles_for_sm90_without_gpu():
    """Triton's AOT path for sm_90 (no GPU): the stream-K kernel with every epilogue flag and the L2
    prefetch compiles, uses wgmma and the ticket atomics, and fits the 232448 bytes of shared memory."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _AOT_SCRIPT], capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this triton install")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for shared, wgmma, atomics in json.loads(proc.stdout.strip().splitlines()[-1]):
        assert wgmma and atomics
        assert shared <= 232448, f"{shared} bytes of shared memory"
