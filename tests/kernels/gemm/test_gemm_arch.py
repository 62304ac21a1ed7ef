"""The GEMM's dispatch on every NVIDIA architecture, checked without a GPU: planning.plan (the decision gemm itself
takes) for each (regime, arch) against the capability model, the H200's decisions against the rule it had before
the model, the configs fitted to each part's shared memory, the forced portable path, and (slow) the planned
configs compiled for their architecture and measured against the part's shared memory and the estimate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.common.capability import (
    INTERPRETER_CAPS,
    caps_for_cc,
    caps_for_product,
    portable_only,
    simulate,
    unmet,
)
from solkit.kernels.gemm import PATHS, plan
from solkit.kernels.gemm import dispatch as G
from solkit.kernels.gemm.gluon import GLUON_MIN_M
from solkit.kernels.gemm.planning import MIN_STAGES, fit_configs, smem_estimate

ARCHS = (80, 86, 89, 90, 100, 120)
PRODUCTS = ("a100-sxm4-80gb", "a10", "rtx-3090", "l40s", "rtx-4090", "h100-sxm", "h200-sxm", "b200", "rtx-5090")
BF16 = torch.bfloat16
DECODE_M = (1, 2, 7, 16, 17, 33, 64)
PREFILL = ((65, 4096, 4096), (512, 4096, 4096), (8192, 4096, 4096), (16384, 8192, 8192), (8192, 8192, 4096))
#: What each architecture takes for aligned bf16 calls: (decode kernel, prefill kernel below / from GLUON_MIN_M rows).
EXPECTED = {
    80: ("pointer", "pointer", "pointer"),
    86: ("pointer", "pointer", "pointer"),
    89: ("pointer", "pointer", "pointer"),
    90: ("splitk", "tma_persistent", "gluon_ws"),
    100: ("splitk", "tma_persistent", "tma_persistent"),
    120: ("splitk", "pointer", "pointer"),
}
PATH_NAMES = [name for name, _ in PATHS["gemm"]]


def _caps(arch):
    return caps_for_cc(arch, sm_count=100)


def test_paths_contract():
    """Fastest first, the portable pointer path last; Gluon only on sm_90, the TMA kernels from sm_90 on."""
    assert PATH_NAMES == ["gluon_ws", "tma_persistent", "splitk", "pointer"]
    needs = dict(PATHS["gemm"])
    assert needs["pointer"].portable and not any(needs[n].portable for n in PATH_NAMES[:-1])
    assert needs["gluon_ws"].min_cc == (9, 0) and needs["gluon_ws"].max_cc == (10, 0)
    assert needs["tma_persistent"].tma and needs["splitk"].tma


@pytest.mark.parametrize("arch", ARCHS)
def test_every_regime_and_arch_against_the_capability_model(arch):
    caps = _caps(arch)
    decode, prefill, big = EXPECTED[arch]
    cases = [(m, 4096, 4096, decode) for m in DECODE_M]
    cases += [(m, n, k, big if m >= GLUON_MIN_M else prefill) for m, n, k in PREFILL]
    for m, n, k, want in cases:
        p = plan(m, n, k, BF16, caps)
        assert p.kernel == want, (arch, m, p)
        assert p.regime == ("decode" if m <= 64 else "prefill")
        assert not unmet(dict(PATHS["gemm"])[p.kernel], caps)  # never a path the device does not meet
        for name in PATH_NAMES[: PATH_NAMES.index(p.kernel)]:  # a faster path skipped: unmet, or its shape rule
            assert name in p.skipped or name in ("gluon_ws", "splitk", "tma_persistent"), (name, p)
        if p.kernel != "gluon_ws":
            assert p.family == {"pointer": "ampere", "tma_persistent": "hopper", "splitk": "hopper"}[p.kernel]
            assert p.configs and (p.fit is None) == (arch == 90)  # measured on sm_90 only: fitted elsewhere
            assert p.fit is None or all(smem_estimate(c, p.kernel) <= caps.smem_per_block for c in p.configs)
        # the dispatcher's own view, asked through a device under simulate
        with simulate(caps):
            if p.kernel != "gluon_ws":
                assert G.select(m, torch.device("cpu"), True) == (p.family, p.regime, p.kernel)


@pytest.mark.parametrize("product", PRODUCTS)
def test_products_plan_like_their_architecture(product):
    caps = caps_for_product(product)
    arch = caps.sm
    for m in (1, 64, 512, 8192):
        got = plan(m, 4096, 4096, BF16, caps).kernel
        assert got == plan(m, 4096, 4096, BF16, _caps(arch)).kernel, (product, m)


def _today(m, aligned):
    """The rule on the H200 before the capability model: decode splitk; prefill gluon_ws from GLUON_MIN_M rows,
    else tma_persistent if aligned bf16/fp16, else pointer with the ampere lists."""
    if m <= 64:
        return "hopper", "decode", "splitk"
    if m >= GLUON_MIN_M and aligned:
        return "hopper", "prefill", "gluon_ws"
    return ("hopper", "prefill", "tma_persistent") if aligned else ("ampere", "prefill", "pointer")


@pytest.mark.parametrize("product", ["h200-sxm", "h100-sxm"])
def test_h200_decisions_unchanged(product):
    """Suite shapes (M 8192 / 16384, N = K 4096 / 8192; decode M 1..64) and the small-prefill and unaligned cases:
    same kernel and family as before, and the tables' autotune lists exactly as they are (never fitted)."""
    caps = caps_for_product(product)
    table = G.load_config_table()
    shapes = [(m, nk, nk) for m in (8192, 16384) for nk in (4096, 8192)] + [(m, 4096, 4096) for m in range(1, 65)]
    shapes += [(65, 4096, 4096), (1000, 4096, 4096), (1023, 8192, 8192)]
    for m, n, k in shapes:
        for aligned in (True, False):
            p = plan(m, n, k, BF16, caps, aligned=aligned)
            assert (p.family, p.regime, p.kernel) == _today(m, aligned), (m, aligned, p)
            assert p.measured and p.fit is None
            if p.kernel != "gluon_ws":
                assert p.configs == table[p.family][p.regime]["autotune"]
        fp32 = plan(m, n, k, torch.float32, caps)
        assert fp32.kernel == ("splitk" if m <= 64 else "pointer")
        tri = plan(m, n, k, BF16, caps, backend="triton")
        assert tri.kernel == ("splitk" if m <= 64 else "tma_persistent")
    gluon = plan(65, 4096, 4096, BF16, caps, backend="gluon")
    assert gluon.kernel == "gluon_ws"


def test_unmeasured_parts_get_fitted_lists():
    """sm_100 and sm_120 take the Hopper lists fitted to their shared memory; the 99 KB parts lose stages where
    a config does not fit, never below MIN_STAGES, and the H200's list is never handed over unchecked."""
    table = G.load_config_table()
    for arch in (80, 86, 89, 100, 120):
        caps = _caps(arch)
        for m in (1, 16, 64, 512, 8192):
            for dtype in (BF16, torch.float32):
                p = plan(m, 4096, 4096, dtype, caps)
                assert not p.measured and p.fit == (caps.smem_per_block, dtype.itemsize)
                source = table[p.family][p.regime]["autotune"]
                assert len(p.configs) <= len(source)
                for cfg in p.configs:
                    assert smem_estimate(cfg, p.kernel, dtype.itemsize) <= caps.smem_per_block
                    same = [c for c in source if {k: v for k, v in c.items() if k != "num_stages"}
                            == {k: v for k, v in cfg.items() if k != "num_stages"}]  # fmt: skip
                    assert same and cfg["num_stages"] <= max(c["num_stages"] for c in same)
                    assert cfg["num_stages"] >= min(MIN_STAGES, min(c["num_stages"] for c in same))
    # the RTX 5090 (99 KB): decode entries of 5 and 6 stages come down; the smallest prefill tile of the TMA kernel
    # does not fit as tuned, so prefill takes the pointer kernel
    p = plan(16, 4096, 4096, BF16, _caps(120))
    assert max(c["num_stages"] for c in p.configs if c["BLOCK_M"] > 1) < 5
    assert "tma_persistent" in plan(8192, 4096, 4096, BF16, _caps(120)).skipped


def test_fit_configs_rule():
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4}
    assert smem_estimate(cfg, "pointer") == (128 + 128) * 64 * 2 * 4 + 1024
    assert smem_estimate(cfg, "tma_persistent") == (128 + 128) * 64 * 2 * 4 + 2 * 128 * 128 * 2 + 1024
    assert smem_estimate({**cfg, "EPI_SUBTILE": 2}, "tma_persistent") == (128 + 128) * 64 * 2 * 4 + 128 * 128 * 2 + 1024
    assert fit_configs([cfg], "pointer", 2, None) == [cfg]
    assert fit_configs([cfg], "pointer", 2, 100 * 1024)[0]["num_stages"] == 3
    assert fit_configs([cfg], "pointer", 2, 40 * 1024) == []  # 2 stages need 64 KB
    # two configs that meet after the reduction are one
    assert len(fit_configs([cfg, {**cfg, "num_stages": 3}], "pointer", 2, 100 * 1024)) == 1


def test_nothing_fits_raises_one_line():
    from dataclasses import replace

    tiny = replace(_caps(86), name="tiny-part", smem_per_block=8 * 1024)
    with pytest.raises(SolkitError, match="gemm: no path runs on tiny-part") as e:
        plan(4096, 4096, 4096, BF16, tiny)
    assert "\n" not in str(e.value)
    with pytest.raises(SolkitError, match="compute capability >= 8.0"):
        plan(64, 64, 64, torch.float16, replace(_caps(86), cc=(7, 5)))


@pytest.mark.parametrize("arch", ARCHS)
def test_forced_portable_takes_pointer(arch, monkeypatch):
    caps = _caps(arch)
    for m in (1, 64, 512, 8192):
        with portable_only():
            p = plan(m, 4096, 4096, BF16, caps)
        assert p.kernel == "pointer" and p.family == "ampere"
        assert all("forced" in " ".join(r) for n, r in p.skipped.items()), p.skipped
    monkeypatch.setenv("SOLKIT_KERNEL_PATH", "portable")
    assert plan(8192, 4096, 4096, BF16, caps).kernel == "pointer"


def test_interpreter_meets_only_the_portable_path():
    for m in (1, 64, 65, 8192):
        p = plan(m, 48, 64, torch.float16, INTERPRETER_CAPS)
        assert (p.kernel, p.family) == ("pointer", "interpreter")
        assert set(p.skipped) == {"gluon_ws", "tma_persistent", "splitk"}


def test_explicit_config_the_device_cannot_run_raises():
    """Under simulate(sm_86) an explicit tma_persistent config is refused in one line (the interpreter alone runs
    every kernel by an explicit config, as the kernel tests do)."""
    x = torch.randn(70, 64, dtype=torch.float16)
    w = torch.randn(48, 64, dtype=torch.float16)
    cfg = {"kernel": "tma_persistent", "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 4,
           "num_stages": 1}  # fmt: skip
    with simulate(_caps(86)), pytest.raises(SolkitError, match="tma_persistent, which sm_86 cannot run"):
        G.gemm(x, w, config=cfg)


_COMPILE_SCRIPT = """
import json, sys, torch
from solkit.kernels.common.capability import caps_for_cc
from solkit.kernels.gemm import compile_for, plan
from solkit.kernels.gemm.planning import smem_estimate
out = []
for arch in (80, 86, 89, 90, 100, 120):
    caps = caps_for_cc(arch, sm_count=100)
    seen = set()
    for m in (1, 16, 64, 8192, 512):
        p = plan(m, 4096, 4096, torch.bfloat16, caps, backend="triton")
        for cfg in p.configs:
            key = (p.kernel, json.dumps(cfg, sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            k = compile_for(arch, {"kernel": p.kernel, **cfg}, activation="silu")
            out.append([arch, p.kernel, k.metadata.shared, smem_estimate(cfg, p.kernel), caps.smem_per_block,
                        p.measured])
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_planned_configs_compile_and_fit_on_every_arch():
    """Every config plan() hands each architecture compiles for it (Triton AOT, no GPU) within the part's shared
    memory per block, and the estimate the fitting uses bounds what the compiler allocates (measured lists on
    sm_90 are used as tuned: they fit by measurement, the estimate is not asked to bound them)."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=900)  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    rows = json.loads(line[len("RESULT ") :])
    assert {r[0] for r in rows} == set(ARCHS)
    for arch, kernel, shared, estimate, limit, measured in rows:
        assert shared <= limit, (arch, kernel, shared, limit)
        if not measured:
            assert shared <= estimate, (arch, kernel, shared, estimate)
