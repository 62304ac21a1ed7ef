"""The Gluon prefill attention forward (lab.kernels.attention_gluon): on the GPU, output and logsumexp against an
fp32 reference (NaN-free, causal and not, GQA, head_dim 64/128, both ring depths, with and without the ping-pong
turns); on the CPU, that the kernel compiles for sm_90 (Gluon does not run in the interpreter) and where the
launcher refuses."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lab.kernels import attention_gluon as AG

from solkit.errors import SolkitError

GPU = torch.cuda.is_available() and AG.unavailable_reason() is None


_COMPILE_SCRIPT = """
import json
from lab.kernels import attention_gluon as AG
k = AG.compile_sm90(causal=True, block_n=64, stages=3, intra=True)
ptx = k.asm["ptx"]
print("RESULT " + json.dumps({"warps": k.metadata.num_warps, "shared": k.metadata.shared,
                              "wgmma": "wgmma.mma_async" in ptx, "tma": "cp.async.bulk.tensor.2d" in ptx,
                              "wait1": "wgmma.wait_group.sync.aligned 1" in ptx}))
"""


@pytest.mark.skipif(AG._IMPORT_ERROR is not None, reason="triton.experimental.gluon not importable")
def test_compiles_for_sm90_with_intra_warpgroup_overlap():
    """The causal intra-warpgroup-overlap variant compiles for sm_90 without a GPU: 12 warps (two consumer
    warpgroups, the loader's group), TMA loads and wgmmas, within the shared memory of a Hopper SM. In a fresh
    process without
    TRITON_INTERPRET (the interpreter's patches of triton.language break Gluon's code generation)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300, cwd=root)  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-2000:]
    result = json.loads(line[len("RESULT ") :])
    assert result["warps"] == 12 and result["wgmma"] and result["tma"]
    assert result["wait1"]  # a P V left in flight while the next tile's softmax runs
    assert result["shared"] <= 227 * 1024


def test_intra_needs_three_stages():
    if not GPU:
        pytest.skip("the launcher's checks run after the device check")
    q = torch.zeros(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(SolkitError, match="stages >= 3"):
        AG.attention_fwd_gluon(q, q, q, intra=True, stages=2)


def test_refuses_a_sequence_not_a_multiple_of_the_tile():
    if GPU:
        q = torch.zeros(1, 2, 100, 64, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(SolkitError, match="multiple"):
            AG.attention_fwd_gluon(q, q, q)
    else:
        with pytest.raises(SolkitError, match="attention_fwd_gluon"):
            AG.attention_fwd_gluon(*(torch.zeros(1, 2, 128, 64),) * 3)


@pytest.mark.gpu
@pytest.mark.parametrize(("hq", "hkv", "S", "D"), [(8, 2, 512, 128), (4, 4, 384, 64), (16, 2, 1024, 128)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("opts", [{}, {"pingpong": True}, {"intra": True, "stages": 3},
                                  {"block_n": 64, "stages": 4, "intra": True}],
                         ids=["n128", "pp", "intra", "n64-intra"])  # fmt: skip
def test_gpu_matches_fp32_reference(hq, hkv, S, D, causal, opts):
    if not GPU:
        pytest.skip(AG.unavailable_reason())
    torch.manual_seed(S + D)
    q, k, v = (torch.randn(2, h, S, D, device="cuda", dtype=torch.bfloat16) for h in (hq, hkv, hkv))
    out, lse = AG.attention_fwd_gluon(q, k, v, causal=causal, **opts)
    rep = hq // hkv
    kk, vv = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    want = F.scaled_dot_product_attention(q.float(), kk, vv, is_causal=causal)
    s = q.float() @ kk.transpose(-1, -2) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    want_lse = torch.logsumexp(s, -1) / math.log(2)
    assert torch.isfinite(out).all()
    assert (out.float() - want).abs().max().item() < 0.02
    assert (lse - want_lse).abs().max().item() < 1e-2
