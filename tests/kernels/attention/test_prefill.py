"""solkit.kernels.attention prefill: forward, logsumexp and gradients against an fp32 reference (SDPA with
enable_gqa, per sequence for varlen), outputs poisoned with NaN so a row never written shows; tiny odd shapes in
the interpreter (S not a multiple of the block, one kv head, GQA group 4, causal edges, varlen with length-1 and
uneven sequences); bf16 at head_dim 64/128 and up to 8k tokens on the GPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels.attention import attention
from solkit.kernels.attention.backward import backward
from solkit.kernels.attention.layout import geometry
from solkit.kernels.attention.prefill import forward

HAS_CUDA = torch.cuda.is_available()
DEV = "cuda" if HAS_CUDA else "cpu"
#: Interpreter launch settings: 16 x 16 tiles, so the test shapes cross several tiles.
FWD = {"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1}
BWD = {"delta_block": 16, "dkdv": {**FWD}, "dq": {**FWD}}


def _rand(*shape, dtype=torch.float32, device=DEV):
    return torch.randn(*shape, dtype=dtype, device=device)


def _sdpa32(q, k, v, causal, scale):
    """fp32 SDPA, (B, H, S, D); kv heads repeated in fp32 (their gradients sum back over the group), so CUDA's
    fp32-capable backends run it whatever their GQA support."""
    rep = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _ref(q, k, v, causal, scale, cu=None):
    """fp32 SDPA, per sequence for varlen ``(T, H, D)``."""
    f = lambda a, b, c: _sdpa32(a, b, c, causal, scale)  # noqa: E731
    if cu is None:
        return f(q.float(), k.float(), v.float())
    outs = []
    for i in range(cu.numel() - 1):
        a, b = int(cu[i]), int(cu[i + 1])
        outs.append(f(*(t[a:b].float().transpose(0, 1) for t in (q, k, v))).transpose(0, 1))
    return torch.cat(outs)


def _ref_lse2(q, k, causal, scale):
    """Base-2 logsumexp of the scaled scores, dense ``(B, Hq, S)``."""
    kk = k.float().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = q.float() @ kk.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.logsumexp(s, -1) / math.log(2)


def _ref_grads(q, k, v, do, causal, scale, cu=None):
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out = _ref(*leaves, causal, scale, cu)
    return (out.detach(), *torch.autograd.grad(out, leaves, do.float()))


# (B, Hq, Hkv, S, D, causal): one kv head, GQA group 4, S not a multiple of 16, exactly one tile, S < a tile
DENSE = [
    (1, 2, 1, 37, 16, True),
    (2, 4, 1, 19, 32, False),
    (1, 4, 2, 33, 16, True),
    (1, 2, 2, 16, 16, True),
    (1, 4, 1, 5, 32, False),
]


@pytest.mark.parametrize(("B", "Hq", "Hkv", "S", "D", "causal"), DENSE)
@pytest.mark.parametrize("tma", [False, True], ids=["ptr", "tma"])
def test_forward_and_lse_match_fp32_reference(B, Hq, Hkv, S, D, causal, tma):
    if tma and HAS_CUDA and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA descriptors need sm_90")
    q, k, v = _rand(B, Hq, S, D), _rand(B, Hkv, S, D), _rand(B, Hkv, S, D)
    scale = D**-0.5
    out = torch.full_like(q, float("nan"))
    _, lse = forward(q, k, v, geometry(q, k, v, causal), causal, scale, None, {**FWD, "tma": tma}, out=out)
    torch.testing.assert_close(out, _ref(q, k, v, causal, scale), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, _ref_lse2(q, k, causal, scale), atol=2e-5, rtol=2e-5)


STRUCTURES = [{"block_m": 16, "block_n": 32}, {"causal_loop": "one"}, {"exp2_fold": 0}, {"rescale": "lazy"},
              {"normalise": "eager"}, {"pipeline": 1},
              {"pipeline": 1, "rescale": "lazy", "causal_loop": "one", "exp2_fold": 0}]  # fmt: skip


@pytest.mark.parametrize("knobs", STRUCTURES, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize(("S", "causal"), [(37, True), (19, False)])
def test_forward_structures_match_fp32_reference(knobs, S, causal):
    """Each structure knob of the forward (prefill.STRUCTURE) gives the same output and logsumexp. Keys grow in
    size along the sequence, so row maxima move by more and less than the lazy rescale's 2^8 threshold."""
    q, k, v = _rand(1, 4, S, 16), _rand(1, 2, S, 16), _rand(1, 2, S, 16)
    k = k * torch.linspace(0.5, 12.0, S, device=DEV)[:, None]
    out = torch.full_like(q, float("nan"))
    _, lse = forward(q, k, v, geometry(q, k, v, causal), causal, 0.25, None, {**FWD, **knobs}, out=out)
    torch.testing.assert_close(out, _ref(q, k, v, causal, 0.25), atol=3e-5, rtol=3e-5)
    torch.testing.assert_close(lse, _ref_lse2(q, k, causal, 0.25), atol=3e-5, rtol=3e-5)


def test_unknown_structure_value_is_one_line():
    q = _rand(1, 2, 8, 16)
    with pytest.raises(SolkitError, match="rescale='sometimes' not allowed"):
        forward(q, q, q, geometry(q, q, q, True), True, 0.25, None, {**FWD, "rescale": "sometimes"})


def test_h200_settings_are_the_swept_ones_per_path(monkeypatch):
    """On an H200 (simulated) attention() takes configs.yaml's sm_90 entries: the forward's TMA path its measured
    tile, the pointer-load path its own override, the backward its one-warpgroup kernels; a caller's options still
    win."""
    import json

    from solkit.kernels.attention import ops
    from solkit.kernels.common.capability import caps_for_product, simulate

    seen = []
    monkeypatch.setattr(ops, "ATTENTION", lambda *a: seen.append((json.loads(a[7]), json.loads(a[8]))) or (a[0], None))
    q = torch.zeros(1, 2, 32, 128)
    with simulate(caps_for_product("h200-sxm")):
        attention(q, q, q, causal=True)
        attention(q, q, q, causal=True, path="portable")
        attention(q, q, q, causal=True, path="portable", options={"fwd": {"num_warps": 8}})
    tile = lambda c: (c["block_m"], c["block_n"], c["num_warps"], c["num_stages"], c["tma"])  # noqa: E731
    assert [tile(f) for f, _ in seen] == [(128, 64, 4, 2, True), (64, 64, 4, 3, False), (64, 64, 8, 3, False)]
    assert all("portable" not in f for f, _ in seen)
    assert [(b["dkdv"]["num_warps"], b["dq"]["num_warps"], b["dkdv"]["tma"]) for _, b in seen[:2]] == [
        (4, 4, True), (4, 4, False)]  # fmt: skip


def test_non_causal_with_more_keys_than_queries():
    q, k, v = _rand(1, 4, 11, 16), _rand(1, 2, 29, 16), _rand(1, 2, 29, 16)
    out = torch.full_like(q, float("nan"))
    forward(q, k, v, geometry(q, k, v, False), False, 0.3, None, {**FWD, "tma": False}, out=out)
    torch.testing.assert_close(out, _ref(q, k, v, False, 0.3), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize(
    ("B", "Hq", "Hkv", "S", "D", "causal", "tma", "atomic"),
    [(*DENSE[0], False, False), (*DENSE[1], False, False), (*DENSE[2], False, False), (*DENSE[2], True, False),
     (*DENSE[0], False, True), (*DENSE[1], True, True)],
)  # fmt: skip
def test_gradients_match_fp32_reference(B, Hq, Hkv, S, D, causal, tma, atomic):
    """``tma``: the dK/dV kernel's descriptor loads; ``atomic``: dQ added by the dK/dV kernel (no dQ kernel)."""
    if tma and HAS_CUDA and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA descriptors need sm_90")
    q, k, v, do = _rand(B, Hq, S, D), _rand(B, Hkv, S, D), _rand(B, Hkv, S, D), _rand(B, Hq, S, D)
    scale, geo = D**-0.5, geometry(q, k, v, causal)
    out, lse = forward(q, k, v, geo, causal, scale, None, {**FWD, "tma": False})
    grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
    config = {**BWD, "dkdv": {**BWD["dkdv"], "tma": tma}, "dq": {**BWD["dq"], "atomic": atomic}}
    got = backward(do, q, k, v, out, lse, geo, causal, scale, None, config, grads=grads)
    want = _ref_grads(q, k, v, do, causal, scale)[1:]
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        torch.testing.assert_close(g, w, atol=5e-5, rtol=5e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(("lens", "causal"), [((1, 20, 9), True), ((17, 1, 5), False)])
def test_varlen_forward_and_gradients(lens, causal):
    """Packed sequences (one of length 1, uneven others): each attends within itself only."""
    hq, hkv, d = 4, 1, 16
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    t = sum(lens)
    q, k, v, do = _rand(t, hq, d), _rand(t, hkv, d), _rand(t, hkv, d), _rand(t, hq, d)
    geo = geometry(q, k, v, causal, cu, max(lens))
    out = torch.full_like(q, float("nan"))
    _, lse = forward(q, k, v, geo, causal, d**-0.5, cu, {**FWD, "tma": False}, out=out)
    want = _ref_grads(q, k, v, do, causal, d**-0.5, cu)
    torch.testing.assert_close(out, want[0], atol=2e-5, rtol=2e-5)
    grads = tuple(torch.full_like(x, float("nan")) for x in (q, k, v))
    got = backward(do, q, k, v, out, lse, geo, causal, d**-0.5, cu, BWD, grads=grads)
    for name, g, w in zip(("dq", "dk", "dv"), got, want[1:]):
        torch.testing.assert_close(g, w, atol=5e-5, rtol=5e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_public_function_is_differentiable_in_fp16():
    """attention() through the custom op and autograd, fp16 (the interpreter computes it in fp32 or better)."""
    q, k, v = (_rand(1, h, 21, 16, dtype=torch.float16).requires_grad_() for h in (4, 1, 1))
    out = attention(q, k, v, causal=True)
    do = _rand(*out.shape, dtype=torch.float16)
    got = (out, *torch.autograd.grad(out, (q, k, v), do))
    want = _ref_grads(q, k, v, do, True, 16**-0.5)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.dtype == torch.float16
        torch.testing.assert_close(g.float(), w, atol=3e-3, rtol=3e-3, msg=lambda m, n=name: f"{n}: {m}")


def test_opcheck_forward_and_backward():
    """torch.library.opcheck (varlen, so the optional cu_seqlens tensor is exercised): schema, fake tensors, autograd
    registration and AOTAutograd, the backward op included."""
    from solkit.kernels.common.ops import options_json

    cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=DEV)
    q, k, v = (_rand(9, h, 16).requires_grad_() for h in (2, 1, 1))
    args = (q, k, v, cu, 5, True, 0.25, options_json({**FWD, "tma": False}), options_json(BWD))
    torch.library.opcheck(torch.ops.solkit.attention.default, args)


def test_the_op_has_a_fake_implementation():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(2, 8, 300, 64), torch.empty(2, 2, 300, 64)
        out, lse = torch.ops.solkit.attention(q, k, k, None, 300, True, 0.125, "{}", "{}")
    assert out.shape == q.shape and lse.shape == (2, 8, 300) and lse.dtype == torch.float32


@pytest.mark.parametrize(
    ("shapes", "kwargs", "match"),
    [
        (((1, 4, 8, 16), (1, 3, 8, 16)), {}, "multiple of kv heads"),
        (((1, 4, 8, 48), (1, 2, 8, 48)), {}, "head_dim 48"),
        (((1, 4, 8, 16), (1, 2, 9, 16)), {"causal": True}, "causal needs as many"),
        (((4, 8, 16), (4, 2, 16)), {}, "must be \\(batch, heads, seq, head_dim\\)"),
        (((1, 4, 8, 16), (1, 2, 8, 16)), {"path": "fast"}, "unknown path 'fast'"),
        (((1, 4, 8, 16), (1, 2, 8, 16)), {"options": {"fwdd": {}}}, "unknown options"),
    ],
)
def test_bad_input_is_one_line(shapes, kwargs, match):
    q, k = torch.zeros(shapes[0]), torch.zeros(shapes[1])
    with pytest.raises(SolkitError, match=match):
        attention(q, k, k, **kwargs)


def test_varlen_needs_int32_offsets():
    q = torch.zeros(8, 2, 16)
    with pytest.raises(SolkitError, match="cu_seqlens must be a 1-D int32"):
        attention(q, q, q, cu_seqlens=torch.tensor([0, 8]))


def test_tma_path_is_refused_where_the_device_has_none():
    if HAS_CUDA and torch.cuda.get_device_capability() >= (9, 0):
        pytest.skip("this device has TMA")
    q = torch.zeros(1, 2, 8, 16, device=DEV)
    with pytest.raises(SolkitError, match="path 'tma' does not run"):
        attention(q, q, q, path="tma")


# ------------------------------------------------------------------------------------------------------ GPU
def _close_to_ref(got, ref32, rival, name, slack=2.0, floor=2e-3):
    """Error against fp32 at most ``slack`` times SDPA's own bf16 error (plus a small floor)."""
    err = (got.float() - ref32).abs().max().item()
    rival_err = (rival.float() - ref32).abs().max().item()
    assert err <= slack * rival_err + floor, f"{name}: max error {err:.3g}, SDPA bf16's {rival_err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("path", "Hq", "Hkv", "S", "D", "causal"),
    [
        ("tma", 32, 8, 8192, 128, True),
        ("portable", 32, 8, 8192, 128, True),
        ("tma", 8, 2, 1000, 64, True),
        ("portable", 8, 8, 777, 128, False),
        ("tma", 16, 4, 4096, 64, False),
    ],
)
def test_gpu_bf16_forward_backward(path, Hq, Hkv, S, D, causal):
    if path == "tma" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA needs sm_90")
    torch.manual_seed(S)
    q, k, v, do = (_rand(1, h, S, D, dtype=torch.bfloat16) for h in (Hq, Hkv, Hkv, Hq))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal, path=path)
    got = (out, *torch.autograd.grad(out, leaves, do))
    want = _ref_grads(q, k, v, do, causal, D**-0.5)
    sdpa_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    sdpa = F.scaled_dot_product_attention(*sdpa_leaves, is_causal=causal, enable_gqa=True)
    rival = (sdpa, *torch.autograd.grad(sdpa, sdpa_leaves, do))
    for name, g, w, r in zip(("out", "dq", "dk", "dv"), got, want, rival):
        assert torch.isfinite(g).all(), name
        _close_to_ref(g, w, r, name)


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_bf16_varlen(D):
    torch.manual_seed(D)
    lens = [1, 700, 129, 2048, 3]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    t = sum(lens)
    q, k, v, do = (_rand(t, h, D, dtype=torch.bfloat16) for h in (16, 4, 4, 16))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = attention(*leaves, causal=True, cu_seqlens=cu, max_seqlen=max(lens))
    got = (out, *torch.autograd.grad(out, leaves, do))
    want = _ref_grads(q, k, v, do, True, D**-0.5, cu)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        err = (g.float() - w).abs().max().item()
        assert err < 0.05 * max(w.abs().max().item(), 1.0), f"{name}: max error {err:.3g}"
