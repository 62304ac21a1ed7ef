"""solkit.kernels.gemm.decode (the splitk kernel for M <= 64): values, split-K hand-off, counters, graphs.

CPU: Triton's interpreter in fp32/fp16 on small odd shapes (K not a multiple of BLOCK_K, a split
piece left empty, M not a multiple of the tile). GPU (marked): bf16 at the issue's decode shapes,
every autotune config, repeated calls and CUDA-graph replays (the counters must come back to zero).
"""

from __future__ import annotations

import pytest
import torch
from gemm_decode_helpers import check_decode as _check
from gemm_decode_helpers import decode_case as _case

from solkit.kernels.gemm import decode
from solkit.kernels.gemm import dispatch as G

HAS_CUDA = torch.cuda.is_available()


def _splitk(**cfg):
    return {"kernel": "splitk", "num_warps": 4, "num_stages": 1, **cfg}


CPU_CONFIGS = {
    "gemv": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1),
    "gemv_split3": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=3),
    "gemv_pipe2_split2": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, PIPE=2),
    "dot": _splitk(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1),
    "dot_split4": _splitk(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=4),
    # W (and x) through TMA descriptors, the residual loaded before the K loop, evict_first on W
    "gemv_tma_pre": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, W_TMA=1, STAGES=3, PRE_RES=1),
    "gemv_tma_split2": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, W_TMA=1, STAGES=2),
    # descriptors made on the host and passed as parameters (the second kernel of gemm_decode.py)
    "gemv_host_tma": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, W_TMA=2, STAGES=2, PRE_RES=1),
    "dot_host_tma_split2": _splitk(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, W_TMA=2, PRE_RES=1),
    "dot_tma_pre_split3": _splitk(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=3, W_TMA=1, PRE_RES=1),
    "dot_evict": _splitk(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, EVICT_W=1),
    # the residual's L2 prefetch is inline PTX: the interpreter runs the config without it
    "gemv_pipe2_prefetch_res": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, PIPE=2, PRE_RES=2),
    # each program starts its K walk at block pid_n (mod the piece's blocks) and wraps around
    "gemv_pipe2_stagger_split3": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=3, PIPE=2, STAGGER=1),
    "gemv_tma_stagger": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, W_TMA=2, STAGES=2, STAGGER=1),
    "dot_tma_stagger_split2": _splitk(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, W_TMA=2, PRE_RES=1, STAGGER=1),
    # each W block reduced over K right away into a [BLOCK_N] running sum (RED_EACH), on every GEMV loop
    "gemv_red_each_split2": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, RED_EACH=1),
    "gemv_red_each_pipe2": _splitk(BLOCK_M=1, BLOCK_N=8, BLOCK_K=64, SPLIT_K=1, PIPE=2, RED_EACH=1),
    "gemv_red_each_stagger": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, PIPE=2, STAGGER=1, RED_EACH=1),
    "gemv_red_each_tma": _splitk(BLOCK_M=1, BLOCK_N=16, BLOCK_K=32, SPLIT_K=1, W_TMA=2, STAGES=2, RED_EACH=1),
    # a whole K row per block (one round trip per program; K = 200 leaves most of the block masked)
    "gemv_whole_row": _splitk(BLOCK_M=1, BLOCK_N=2, BLOCK_K=256, SPLIT_K=1, RED_EACH=1),
    # persistent whole-row GEMV: programs walk the row tiles grid-stride (2 "SMs" in the interpreter, so
    # each program takes several tiles, the last one partly past N); K = 200 < BLOCK_K masks the row's end
    "gemv_persist": _splitk(BLOCK_M=1, BLOCK_N=4, BLOCK_K=256, SPLIT_K=1, PERSIST=2),
    "gemv_persist_evict": _splitk(BLOCK_M=1, BLOCK_N=2, BLOCK_K=256, SPLIT_K=1, PERSIST=1, EVICT_W=1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("M", "N", "K"), [(1, 40, 200), (5, 48, 64), (17, 33, 130)])
@pytest.mark.parametrize("name", list(CPU_CONFIGS))
def test_splitk_values(dtype, M, N, K, name, device):
    """K = 200 with BLOCK_K 32 and 4 pieces leaves the last piece short; K = 64 with 3 or 4 pieces
    leaves one empty (its partial is zero, it still draws a ticket)."""
    if name.startswith("gemv") and M > 5:
        pytest.skip("one program per row: M = 5 covers several row tiles; 17 is slow in the interpreter")
    x, w, r, b = _case(M, N, K, dtype, device, seed=M + K, bias=True)
    kw = dict(alpha=0.5, beta=-2.0, activation="silu")
    out = torch.full((M, N), float("nan"), device=device, dtype=dtype)
    y = G.gemm(x, w, b, r, config=CPU_CONFIGS[name], out=out, **kw)
    assert G.LAST_LAUNCH["kernel"] == "splitk"
    _check(y, x, w, r, b, **kw)


def test_tma_config_falls_back_on_unaligned_rows(device):
    """K = 37 (74-byte rows) cannot be addressed by TMA: a W_TMA config runs the pointer loads instead."""
    from solkit.kernels.gemm.decode import tma_usable

    x, w, r, _ = _case(3, 24, 37, torch.float16, device, seed=5)
    args = {"W_TMA": 1, "x_ptr": x, "w_ptr": w, "stride_wn": w.stride(0), "stride_xm": x.stride(0)}
    assert tma_usable(args) == 0
    assert tma_usable({**args, "W_TMA": 0}) == 0
    x8, w8, _, _ = _case(3, 24, 64, torch.float16, device, seed=5)
    assert tma_usable({**args, "x_ptr": x8, "w_ptr": w8, "stride_wn": 64, "stride_xm": 64}) == 1
    cfg = _splitk(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, W_TMA=1, PRE_RES=1)
    out = torch.full((3, 24), float("nan"), device=device, dtype=torch.float16)
    _check(G.gemm(x, w, residual=r, config=cfg, out=out), x, w, r)


def test_counters_reset_and_calls_repeat(device):
    """The last program of every tile zeroes its counter: repeated calls give the same answer, and
    the scratch counters are all zero between calls."""
    dtype = torch.float32
    x, w, r, _ = _case(3, 72, 96, dtype, device, seed=9)
    cfg = CPU_CONFIGS["dot_split4"]
    first = G.gemm(x, w, residual=r, config=cfg)
    for _ in range(2):
        again = G.gemm(x, w, residual=r, config=cfg)
        assert torch.equal(first, again)
    for _parts, counters in decode.SCRATCH.values():
        assert int(counters.abs().sum().item()) == 0
    _check(first, x, w, r)


@pytest.mark.parametrize("M", [1, 7, 16, 40, 64])
def test_autotuned_decode_takes_splitk(M, device):
    """Decode-sized M goes to splitk by default on a part with TMA (the Hopper lists); the interpreter meets only
    the portable pointer kernel (splitk runs there by explicit configs, and under capability.simulate of the H200
    in test_gemm_tuner.py)."""
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("parts without TMA keep the pointer kernel for decode")
    dtype = torch.float16
    x, w, r, _ = _case(M, 48, 64, dtype, device, seed=M)
    y = G.gemm(x, w, residual=r)
    assert G.LAST_LAUNCH["kernel"] == ("pointer" if device == "cpu" else "splitk")
    assert G.LAST_LAUNCH["regime"] == "decode"
    if device == "cuda":
        assert G.LAST_LAUNCH["config"]["BLOCK_M"] == (1 if M == 1 else 16 if M <= 16 else 64)
    _check(y, x, w, r)


def test_workspace_grows_and_keeps_old_buffers():
    """A larger call replaces the scratch but keeps the old buffers alive (a captured graph may use them)."""
    dev = torch.device("cuda" if HAS_CUDA else "cpu")
    cfg = [_splitk(BLOCK_M=1, BLOCK_N=8, BLOCK_K=32, SPLIT_K=4)]
    small = decode.workspace(dev, 1, 8, cfg)
    big = decode.workspace(dev, 64, 4096, cfg)
    assert big[0].numel() >= 4 * 64 * 4096 and big[1].numel() >= 64 * 512
    if big[0].data_ptr() != small[0].data_ptr():
        assert any(t.data_ptr() == small[0].data_ptr() for t in decode.OUTGROWN)


# --------------------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16, 64])
def test_bf16_decode_shapes_every_autotune_config(M):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("Hopper list")
    x, w, r, _ = _case(M, 4096, 4096, torch.bfloat16, "cuda", seed=M)
    for cfg in G.load_config_table()["hopper"]["decode"]["autotune"]:
        if cfg["BLOCK_M"] < M:
            continue
        out = torch.full((M, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
        y = G.gemm(x, w, residual=r, config={"kernel": "splitk", **cfg}, out=out)
        _check(y, x, w, r)


@pytest.mark.gpu
def test_bf16_split_k_in_cuda_graph():
    """Captured once, replayed on new inputs: the split-K hand-off and counter reset hold under replay."""
    cfg = _splitk(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, SPLIT_K=4, num_stages=3)
    _check_graph_replays(cfg, 16, 1024, 4000, seed=1, replay_seeds=(2, 3))  # K not a multiple of BLOCK_K


def _check_graph_replays(cfg, M, N, K, *, seed, replay_seeds):
    """Capture one bf16 GEMM with ``cfg`` in a CUDA graph, then replay it on new inputs copied into the
    captured buffers (output poisoned before each replay) and check every result."""
    x, w, r, _ = _case(M, N, K, torch.bfloat16, "cuda", seed=seed)
    G.gemm(x, w, residual=r, config=cfg)  # warm-up: compiles, allocates the scratch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        y = G.gemm(x, w, residual=r, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    for replay_seed in replay_seeds:
        x2, w2, r2, _ = _case(M, N, K, torch.bfloat16, "cuda", seed=replay_seed)
        x.copy_(x2)
        w.copy_(w2)
        r.copy_(r2)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(y, x, w, r)


@pytest.mark.gpu
@pytest.mark.parametrize("w_tma", [1, 2])
@pytest.mark.parametrize(("M", "K"), [(1, 4096), (5, 4000), (64, 4001)])
def test_bf16_tma_weight_stream(w_tma, M, K):
    """W by TMA (descriptors made on the device or the host), the residual preloaded or prefetched, bf16:
    K = 4000 (zero-filled columns past K), 4001 (rows not 16-byte aligned: pointer fallback), M = 5
    (rows past M zero-filled), N = 1000 (a short last tile)."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    N = 1000
    x, w, r, b = _case(M, N, K, torch.bfloat16, "cuda", seed=K + M, bias=True)
    bm = 1 if M == 1 else 16 if M <= 16 else 64
    splits = (1, 3) if w_tma == 2 else (3,)
    cfgs = [_splitk(BLOCK_M=bm, BLOCK_N=32, BLOCK_K=256, SPLIT_K=s, W_TMA=w_tma, PRE_RES=1 + (s == 1), STAGES=4,
                    num_stages=1 if bm == 1 else 3) for s in splits]  # fmt: skip
    for cfg in cfgs:
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        y = G.gemm(x, w, b, r, config=cfg, out=out, activation="silu")
        _check(y, x, w, r, b, activation="silu")


@pytest.mark.gpu
def test_bf16_host_tma_in_cuda_graph():
    """Host-made descriptors are baked into the captured launch: replays on new data in the same buffers."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90")
    cfg = _splitk(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, SPLIT_K=2, W_TMA=2, PRE_RES=1, num_stages=4)
    _check_graph_replays(cfg, 16, 1024, 4096, seed=4, replay_seeds=(5, 6))


@pytest.mark.gpu
@pytest.mark.parametrize(("M", "K"), [(1, 4096), (3, 4000)])
def test_bf16_persistent_gemv(M, K):
    """PERSIST on the H200's grid (4 programs per SM over 500 two-row tiles): every tile of every row written,
    K = 4000 masks the row's end; and under CUDA-graph replay on new data."""
    N = 1000
    x, w, r, b = _case(M, N, K, torch.bfloat16, "cuda", seed=K + M, bias=True)
    cfg = _splitk(BLOCK_M=1, BLOCK_N=2, BLOCK_K=4096, SPLIT_K=1, PERSIST=4)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    y = G.gemm(x, w, b, r, config=cfg, out=out, activation="silu")
    _check(y, x, w, r, b, activation="silu")
    _check_graph_replays(cfg, M, N, K, seed=7, replay_seeds=(8,))
