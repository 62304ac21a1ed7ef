"""solkit.kernels.gemm.dispatch and ops: values and gradients against an fp32 reference.

On the CPU both kernels (pointer and tma_persistent) run through Triton's interpreter in fp32/fp16 on
small odd shapes; the bf16 and Hopper checks are marked gpu. Tolerance everywhere: the kernel's error
against the fp32 reference is at most 2x torch's own error in the same dtype, plus a small atol.
"""

from __future__ import annotations

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.common.capability import caps_for_product, simulate
from solkit.kernels.gemm import FusedLinearResidual, fused_linear
from solkit.kernels.gemm import dispatch as G

HAS_CUDA = torch.cuda.is_available()
TMA_CPU_CONFIG = {
    "kernel": "tma_persistent", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2,
    "EPI_SUBTILE": 2, "FLATTEN": True, "WARP_SPEC": False, "num_warps": 4, "num_stages": 1,
}  # fmt: skip
EPILOGUES = {
    "plain": dict(bias=False, residual=False, alpha=1.0, beta=1.0, activation="none"),
    "residual": dict(bias=False, residual=True, alpha=1.0, beta=1.0, activation="none"),
    "bias_res_scaled": dict(bias=True, residual=True, alpha=0.5, beta=-2.0, activation="none"),
    "silu": dict(bias=True, residual=True, alpha=1.0, beta=1.0, activation="silu"),
    "gelu_tanh": dict(bias=True, residual=False, alpha=2.0, beta=1.0, activation="gelu_tanh"),
}


def _inputs(M, N, K, dtype, device, ep, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(device, dtype)
    w = (torch.randn(N, K, generator=gen) / K**0.5).to(device, dtype)
    b = torch.randn(N, generator=gen).to(device, dtype) if ep["bias"] else None
    r = torch.randn(M, N, generator=gen).to(device, dtype) if ep["residual"] else None
    return x, w, b, r


def _torch_same_dtype(x, w, b, r, ep):
    return G.native(x, w, b, r, alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])


def _assert_close(out, ref, torch_out, atol):
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "non-finite output (unwritten or overflow)"
    err = (out.float() - ref).abs().max().item()
    budget = 2 * (torch_out.float() - ref).abs().max().item() + atol
    assert err <= budget, f"max error {err:.3e} > budget {budget:.3e}"


ATOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("M", "K", "N"), [(1, 64, 48), (17, 96, 96), (130, 96, 48)])
@pytest.mark.parametrize("kernel", ["pointer", "tma_persistent"])
@pytest.mark.parametrize("epilogue", ["residual", "bias_res_scaled", "silu", "gelu_tanh"])
def test_values_interpreter_and_gpu(dtype, M, K, N, kernel, epilogue, device):
    ep = EPILOGUES[epilogue]
    if device == "cuda" and dtype == torch.float32 and kernel == "tma_persistent":
        pytest.skip("fp32 takes the pointer kernel on the GPU")
    x, w, b, r = _inputs(M, N, K, dtype, device, ep, seed=M * 7 + K)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    config = TMA_CPU_CONFIG if kernel == "tma_persistent" else None
    if kernel == "pointer":  # explicit: decode-sized M takes the splitk kernel (test_gemm_decode.py)
        family = "ampere" if device == "cuda" else "interpreter"
        config = {"kernel": "pointer", **G.load_config_table()[family]["prefill"]["autotune"][-1]}
    y = G.gemm(x, w, b, r, config=config, **kw)
    assert G.LAST_LAUNCH["kernel"] == kernel
    ref = G.reference(x, w, b, r, **kw)
    _assert_close(y, ref, _torch_same_dtype(x, w, b, r, ep), ATOL[dtype])


@pytest.mark.parametrize("subtile", [1, 4])
def test_tma_epilogue_subtiles(subtile, device):
    """The epilogue in 1 or 4 column pieces (2 is covered above), N not a multiple of the tile."""
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA path needs sm_90+")
    ep = EPILOGUES["bias_res_scaled"]
    dtype = torch.float16
    x, w, b, r = _inputs(70, 80, 64, dtype, device, ep, seed=subtile)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    cfg = {**TMA_CPU_CONFIG, "BLOCK_N": 64, "EPI_SUBTILE": subtile}
    if device == "cuda":
        cfg.update(BLOCK_M=64, BLOCK_K=64, num_stages=3)
    y = G.gemm(x, w, b, r, config=cfg, **kw)
    _assert_close(y, G.reference(x, w, b, r, **kw), _torch_same_dtype(x, w, b, r, ep), ATOL[dtype])


_PRELOAD_CASES = [(3, False, 2, "bias_res_scaled"), (3, True, 4, "bias_res_scaled"), (4, True, 2, "bias_res_scaled"),
                  (3, True, 2, "plain"), (4, True, 4, "gelu_tanh"), (5, False, 1, "bias_res_scaled"),
                  (6, True, 2, "silu"), (7, True, 4, "bias_res_scaled")]  # fmt: skip


@pytest.mark.parametrize(("subtile", "prefetch", "epilogue"), [(1, 0, "residual"), (2, 6, "silu"), (4, 5, "plain")])
def test_tma_y_evict_first(subtile, prefetch, epilogue, device):
    """Y_EVICT_FIRST: y by plain masked stores (evict_first in L2) instead of TMA stores; ragged M and N."""
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA path needs sm_90+")
    ep = EPILOGUES[epilogue]
    x, w, b, r = _inputs(70, 80, 64, torch.float16, device, ep, seed=subtile)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    cfg = {**TMA_CPU_CONFIG, "BLOCK_N": 64, "EPI_SUBTILE": subtile, "PREFETCH_RES": prefetch, "Y_EVICT_FIRST": True}
    if device == "cuda":
        cfg.update(BLOCK_M=64, BLOCK_K=64, num_stages=3, PF_DIST=2)
    y = torch.full((70, 80), float("nan"), dtype=torch.float16, device=device)
    G.gemm(x, w, b, r, config=cfg, out=y, **kw)
    _assert_close(y, G.reference(x, w, b, r, **kw), _torch_same_dtype(x, w, b, r, ep), ATOL[torch.float16])


@pytest.mark.parametrize(("prefetch", "flatten", "subtile", "epilogue"), _PRELOAD_CASES)
def test_tma_residual_preloaded(prefetch, flatten, subtile, epilogue, device):
    """PREFETCH_RES 3/4: the residual tile by plain loads (tile start / epilogue start), split into the
    epilogue pieces; ragged M and N. Without a residual the same configs must compile (the suite's
    plain GEMM and gate/up problems use the prefetching configs too)."""
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA path needs sm_90+")
    ep = EPILOGUES[epilogue]
    dtype = torch.float16
    x, w, b, r = _inputs(70, 80, 64, dtype, device, ep, seed=prefetch)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    cfg = {**TMA_CPU_CONFIG, "BLOCK_N": 64, "EPI_SUBTILE": subtile, "FLATTEN": flatten, "PREFETCH_RES": prefetch}
    if device == "cuda":
        cfg.update(BLOCK_M=64, BLOCK_K=64, num_stages=3, PF_DIST=2)
    y = G.gemm(x, w, b, r, config=cfg, **kw)
    _assert_close(y, G.reference(x, w, b, r, **kw), _torch_same_dtype(x, w, b, r, ep), ATOL[dtype])


_LATE_CASES = [(8, 0, 2, "bias_res_scaled", 64), (8, 2, 1, "residual", 200), (9, 1, 2, "silu", 200),
               (10, 3, 2, "bias_res_scaled", 200), (10, 8, 2, "residual", 64), (8, 2, 4, "plain", 64),
               (11, 2, 2, "bias_res_scaled", 200), (11, 1, 2, "silu", 64),
               (12, 0, 2, "bias_res_scaled", 200)]  # fmt: skip


@pytest.mark.parametrize(("prefetch", "ld_dist", "subtile", "epilogue", "K"), _LATE_CASES)
def test_tma_residual_loaded_late(prefetch, ld_dist, subtile, epilogue, K, device):
    """PREFETCH_RES 8-12: the residual (8: whole tile, 9: left half, 10: left then right half, 11: as 10
    by TMA) loaded into registers LD_DIST k-steps before the epilogue (0 counts as 1; more than the K
    loop: at its start), 12 both halves at the epilogue; ragged M, N and K; a NaN-poisoned output."""
    if device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA path needs sm_90+")
    ep = EPILOGUES[epilogue]
    x, w, b, r = _inputs(70, 80, K, torch.float16, device, ep, seed=prefetch + ld_dist)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    cfg = {**TMA_CPU_CONFIG, "BLOCK_N": 64, "BLOCK_K": 16, "EPI_SUBTILE": subtile, "PREFETCH_RES": prefetch,
           "LD_DIST": ld_dist, "PF_DIST": ld_dist + 2, "Y_EVICT_FIRST": subtile == 2}  # fmt: skip
    if device == "cuda":
        cfg.update(BLOCK_M=64, BLOCK_K=64, num_stages=3)
    y = torch.full((70, 80), float("nan"), dtype=torch.float16, device=device)
    G.gemm(x, w, b, r, config=cfg, out=y, **kw)
    _assert_close(y, G.reference(x, w, b, r, **kw), _torch_same_dtype(x, w, b, r, ep), ATOL[torch.float16])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_leading_dims_and_plain_gemm(dtype, device):
    ep = EPILOGUES["plain"]
    x = torch.randn(2, 9, 64).to(device, dtype)
    w = torch.randn(48, 64).to(device, dtype) / 8
    y = G.gemm(x, w)
    assert y.shape == (2, 9, 48)
    _assert_close(y, G.reference(x, w), _torch_same_dtype(x, w, None, None, ep), ATOL[dtype])


def test_output_fully_written_and_strided_input(device):
    """A poisoned ``out`` must be overwritten everywhere; a non-contiguous x is accepted."""
    dtype = torch.float32
    big = torch.randn(33, 128).to(device, dtype)
    x = big[:, ::2]  # inner stride 2: copied to contiguous by the launcher
    w = torch.randn(40, 64).to(device, dtype) / 8
    r = torch.randn(33, 40).to(device, dtype)
    out = torch.full((33, 40), float("nan"), device=device, dtype=dtype)
    y = G.gemm(x, w, residual=r, out=out)
    assert y.data_ptr() == out.data_ptr()
    _assert_close(y, G.reference(x, w, residual=r), x @ w.T + r, ATOL[dtype])


def test_bad_inputs_raise_solkit_error(device):
    x = torch.randn(4, 16).to(device)
    w = torch.randn(8, 16).to(device)
    with pytest.raises(SolkitError, match="activation"):
        G.gemm(x, w, activation="relu6")
    with pytest.raises(SolkitError, match="disagree"):
        G.gemm(x, torch.randn(8, 15).to(device))
    with pytest.raises(SolkitError, match="residual"):
        G.gemm(x, w, residual=torch.randn(4, 9).to(device))
    with pytest.raises(SolkitError, match="dtype"):
        G.gemm(x.to(torch.float64), w.to(torch.float64))


def test_m_bucket_and_config_table():
    assert [G.m_bucket(m) for m in (1, 2, 3, 16, 17, 64, 65, 4096, 5000)] == [1, 2, 4, 16, 32, 64, 128, 4096, 8192]
    cap = G.load_config_table()["m_bucket_cap"]
    assert G.m_bucket(10**6) == cap
    table = G.load_config_table()
    for family in G.FAMILIES:
        for regime in ("prefill", "decode"):
            kernel = table[family][regime]["kernel"]
            for cfg in table[family][regime]["autotune"]:
                tc = G.to_triton_config(cfg, kernel)
                extra = "SPLIT_K" if kernel == "splitk" else "GROUP_M"
                assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", extra} <= set(tc.kwargs)
    assert table["hopper"]["prefill"]["kernel"] == "tma_persistent"
    for bucket in (16, 256, 512, 1024, 8192):  # keep what autotune times per bucket short: each entry compiles
        timed = [c for c in table["hopper"]["prefill"]["autotune"] if G.m_range(c)[0] <= bucket <= G.m_range(c)[1]]
        assert 1 <= len(timed) <= 6, (bucket, len(timed))


def test_decode_prune_picks_block_m_covering_bucket():
    configs = [G.to_triton_config(c) for c in G.load_config_table()["hopper"]["decode"]["autotune"]]
    for bucket, want in [(1, 1), (2, 16), (16, 16), (32, 64), (64, 64)]:
        for kept in (
            G.prune_by_block_m(configs, {"M_BUCKET": bucket}),
            G.prune_by_block_m(configs, {}, M_BUCKET=bucket),
        ):
            assert kept and all(c.kwargs["BLOCK_M"] == want for c in kept)


def test_autotuned_hopper_lists_in_interpreter(monkeypatch):
    """The real triton.autotune plumbing (key, M bucket, decode pruning, LAST_LAUNCH) over the Hopper
    lists, in the interpreter with a stand-in timer (the interpreter cannot time kernels)."""
    if HAS_CUDA:
        pytest.skip("interpreter-only check")
    monkeypatch.setenv("SOLKIT_GEMM_TUNER", "triton")  # the way back (solkit.tune's path: test_gemm_tuner.py)
    calls = []

    def fake_bench(kernel_call, quantiles=None, **_):
        kernel_call()
        calls.append(1)
        return [1000.0 - len(calls)] * 3  # the last config timed "wins"

    tuners = {}
    make = G._autotuner.__wrapped__  # the uncached builder

    def tuner(family, regime):
        if (family, regime) not in tuners:
            tuners[family, regime] = make(family, regime, fake_bench)
        return tuners[family, regime]

    monkeypatch.setattr(G, "_autotuner", tuner)
    with simulate(caps_for_product("h200-sxm")):  # the H200's plan (Hopper lists), run by the interpreter
        _run_hopper_lists(calls)


def _run_hopper_lists(calls):
    table = G.load_config_table()["hopper"]
    ep = EPILOGUES["residual"]
    small = [c for c in table["prefill"]["autotune"] if G.m_range(c)[0] <= 256 <= G.m_range(c)[1]]
    for M, regime in [(17, "decode"), (130, "prefill")]:
        x, w, b, r = _inputs(M, 48, 64, torch.float16, "cpu", ep, seed=M)
        y = G.gemm(x, w, b, r)
        launch = G.LAST_LAUNCH
        assert launch["regime"] == regime and launch["kernel"] == table[regime]["kernel"]
        assert launch["m_bucket"] == G.m_bucket(M)
        tall = [c for c in table[regime]["autotune"] if c["BLOCK_M"] == 64]  # M = 17 -> bucket 32 -> 64 rows
        want = small[-1] if regime == "prefill" else tall[-1]  # M = 130 -> bucket 256 -> the small tiles
        keys = [k for k in want if k not in ("PREFETCH_RES", "m_min", "m_max")]  # interpreter: no PTX prefetch
        assert {k: launch["config"][k] for k in keys} == {k: want[k] for k in keys}
        _assert_close(y, G.reference(x, w, b, r), _torch_same_dtype(x, w, b, r, ep), ATOL[torch.float16])
    n_decode = sum(c["BLOCK_M"] == 64 for c in table["decode"]["autotune"])
    assert len(calls) == n_decode + len(small)


def test_prefill_prune_by_m_range():
    """Large M buckets time only the big tiles, a few hundred rows only the small ones."""
    tuner = G._autotuner("hopper", "prefill")
    for bucket in (128, 512, 1024, 8192):
        kept = G.prune_by_m_range(tuner.configs, {}, M_BUCKET=bucket)
        assert kept
        big = [c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 128 * 256 for c in kept]
        assert all(big) if bucket >= 1024 else not any(big), bucket
        assert all(set(c.kwargs).isdisjoint({"m_min", "m_max", "kernel"}) for c in kept)


def test_select_paths():
    cpu = torch.device("cpu")
    assert G.select(1, cpu, True)[:2] == ("interpreter", "decode")
    assert G.select(65, cpu, True)[:2] == ("interpreter", "prefill")


_AOT_SCRIPT = """
import json, sys
from solkit.kernels.gemm import dispatch as G
from solkit.kernels.gemm.decode import KNOB_DEFAULTS
t = G.load_config_table()
out = []
for arch, family, regime in [(90, "hopper", "prefill"), (90, "hopper", "decode"), (80, "ampere", "prefill")]:
    entry = t[family][regime]
    for cfg in entry["autotune"][:int(sys.argv[1])]:
        k = G.compile_for(arch, {"kernel": entry["kernel"], **cfg}, activation="gelu_tanh")
        out.append([arch, family, regime, k.metadata.shared, "mma" in k.asm["ptx"] or cfg["BLOCK_M"] == 1])
# a decode config that leaves the decode knobs out compiles with the launcher's defaults
bare = {k: v for k, v in t["hopper"]["decode"]["autotune"][0].items() if k not in KNOB_DEFAULTS}
k = G.compile_for(90, {"kernel": "splitk", **bare})
out.append([90, "hopper", "decode, knobs left out", k.metadata.shared, True])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_configs_compile_for_sm90_and_sm80_without_gpu():
    """Compile (Triton AOT, no GPU) the first Hopper prefill/decode and Ampere configs with every epilogue
    flag on: catches code the interpreter accepts but the compiler rejects, and configs whose shared
    memory does not fit (sm_90: 232448 bytes, sm_80: 166912)."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _AOT_SCRIPT, "1"], capture_output=True, text=True, env=env, timeout=300
    )
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("no ptxas in this triton install")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rows) == 4
    for arch, family, regime, shared, has_mma in rows:
        assert has_mma, f"{family}.{regime}: no tensor-core instructions (only the BLOCK_M 1 GEMV goes without)"
        assert shared <= (232448 if arch == 90 else 166912), f"{family}.{regime}: {shared} bytes of shared memory"


def _grad_case(dtype, device, ep, M=17, K=64, N=48):
    x, w, b, r = _inputs(M, N, K, dtype, device, ep, seed=3)
    leaves = [t.clone().requires_grad_(True) if t is not None else None for t in (x, w, b, r)]
    ref_leaves = [t.detach().float().clone().requires_grad_(True) if t is not None else None for t in (x, w, b, r)]
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    y = fused_linear(*leaves, **kw)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).to(device, dtype)
    y.backward(dy)
    yr = _torch_same_dtype(*ref_leaves, ep)
    yr.backward(dy.float())
    for got, want, name in zip(leaves, ref_leaves, "xwbr"):
        if got is None:
            continue
        assert got.grad is not None, f"no gradient for {name}"
        scale = want.grad.abs().max().item() + 1e-6
        err = (got.grad.float() - want.grad).abs().max().item() / scale
        assert err < (1e-5 if dtype == torch.float32 else 1e-2), f"grad {name}: rel err {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("epilogue", ["residual", "bias_res_scaled", "silu", "gelu_tanh"])
def test_gradients(dtype, epilogue, device):
    if device == "cpu" and dtype == torch.float16 and epilogue in ("silu", "gelu_tanh"):
        pytest.skip("covered in fp32 on the CPU")
    _grad_case(dtype, device, EPILOGUES[epilogue])


def test_module_drop_in(device):
    torch.manual_seed(0)
    layer = FusedLinearResidual(64, 48, device=device)
    assert layer.bias is None and layer.weight.shape == (48, 64)
    x = torch.randn(3, 5, 64, device=device)
    r = torch.randn(3, 5, 48, device=device)
    y = layer(x, r)
    ref = torch.nn.functional.linear(x, layer.weight) + r
    assert torch.allclose(y, ref, atol=1e-4, rtol=1e-4)
    y.sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.shape == (48, 64)


def test_module_takes_nn_linear_state_dict(device):
    """Drop-in: an nn.Linear's weights (and bias) load unchanged, and the output is linear(x) + residual."""
    torch.manual_seed(1)
    ref = torch.nn.Linear(96, 48, bias=True, device=device)
    layer = FusedLinearResidual(96, 48, bias=True, device=device)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(7, 96, device=device)
    r = torch.randn(7, 48, device=device)
    assert torch.allclose(layer(x, r), ref(x) + r, atol=1e-4, rtol=1e-4)
    assert "bias=True" in repr(layer)


# --------------------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
@pytest.mark.parametrize(("M", "N", "K"), [(1, 4096, 4096), (64, 1024, 512), (300, 512, 256), (1000, 1024, 2048)])
def test_bf16_autotuned_paths(M, N, K):
    """bf16 through autotune: decode (M<=64) and the Hopper TMA persistent path, M not a tile multiple."""
    ep = EPILOGUES["residual"]
    x, w, b, r = _inputs(M, N, K, torch.bfloat16, "cuda", ep, seed=M)
    y = G.gemm(x, w, b, r)
    hopper = torch.cuda.get_device_capability()[0] >= 9
    expect_kernel = ("tma_persistent" if M > 64 else "splitk") if hopper else "pointer"
    assert G.LAST_LAUNCH["kernel"] == expect_kernel
    ref = G.reference(x, w, b, r)
    _assert_close(y, ref, torch.addmm(r, x, w.T), ATOL[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["bias_res_scaled", "silu", "gelu_tanh"])
def test_bf16_epilogues_hopper(epilogue):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("Hopper path")
    ep = EPILOGUES[epilogue]
    x, w, b, r = _inputs(257, 384, 320, torch.bfloat16, "cuda", ep, seed=11)
    kw = dict(alpha=ep["alpha"], beta=ep["beta"], activation=ep["activation"])
    cfg = {"kernel": "tma_persistent", **G.load_config_table()["hopper"]["prefill"]["autotune"][0]}
    y = G.gemm(x, w, b, r, config=cfg, **kw)
    _assert_close(y, G.reference(x, w, b, r, **kw), _torch_same_dtype(x, w, b, r, ep), ATOL[torch.bfloat16])


@pytest.mark.gpu
def test_bf16_gradients():
    _grad_case(torch.bfloat16, "cuda", EPILOGUES["bias_res_scaled"], M=130, K=256, N=192)
