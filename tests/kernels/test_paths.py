"""solkit.kernels.paths and every family's ``PATHS``: each (kernel, architecture) decision checked against the
capability model, without a GPU (``simulate(caps)`` makes the dispatchers plan for another product).

* every kernel lists its paths fastest first with the portable path last, and ``describe`` covers every public
  kernel;
* on sm_80, 86, 89, 90, 100, 120 and the interpreter no chosen path has unmet needs, the row dispatchers' own
  choices (softmax plan, norm backward plan, cross-entropy launch settings, GeGLU's tanh) stay inside the allowed
  set, and ``portable_only`` leaves only portable paths;
* on the H200 every choice and launch setting is the tuned one (the table below: what the dispatchers chose
  before the capability model), and on parts the settings were not measured on they are derived from the part.

The GPU section runs every public row kernel through its portable path on the device (``portable_only``) against
an fp64 reference: the H200 check that forcing the portable path still gives correct results.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import solkit.kernels as K
from solkit.kernels.common.capability import (
    INTERPRETER_CAPS,
    allowed,
    caps_for_cc,
    caps_for_product,
    portable_only,
    simulate,
    unmet,
)
from solkit.kernels.paths import all_paths, describe

PRODUCTS = {80: "a100-sxm4-80gb", 86: "rtx-3090", 89: "rtx-4090", 90: "h200-sxm", 100: "b200", 120: "rtx-5090"}
CAPS = {cc: caps_for_product(p) for cc, p in PRODUCTS.items()} | {"interp": INTERPRETER_CAPS}
H200 = CAPS[90]
BF16 = torch.bfloat16
#: Public kernel (``solkit.kernels``) -> the launcher directions ``describe`` must cover.
PUBLIC = {
    "gemm": ["gemm"], "fused_linear": ["gemm"], "rmsnorm": ["rmsnorm_fwd", "rmsnorm_bwd"],
    "add_rmsnorm": ["add_rmsnorm_fwd", "rmsnorm_bwd"], "layernorm": ["layernorm_fwd", "layernorm_bwd"],
    "softmax": ["softmax_fwd", "softmax_bwd"], "cross_entropy": ["cross_entropy"],
    "fused_linear_cross_entropy": ["fused_linear_cross_entropy"], "apply_rope": ["rope_fwd", "rope_bwd"],
    "swiglu": ["swiglu_fwd", "swiglu_bwd"], "geglu": ["geglu_fwd", "geglu_bwd"],
    "glu_grads": ["swiglu_bwd", "geglu_bwd"],
    "embedding": ["embedding_fwd", "embedding_bwd"], "attention": ["attention_fwd", "attention_bwd"],
    "decode_attention": ["decode_attention"],
}  # fmt: skip


def _row_families() -> dict:
    out: dict = {}
    for family in ("softmax", "cross_entropy", "norms", "rope", "gates"):
        out.update(importlib.import_module(f"solkit.kernels.{family}").PATHS)
    return out


def test_paths_are_well_formed():
    for kernel, paths in _row_families().items():
        names = [n for n, _ in paths]
        assert len(set(names)) == len(names), kernel
        assert paths[-1][1].portable, f"{kernel}: the portable path must be last"
        for cc, caps in CAPS.items():
            assert not unmet(paths[-1][1], caps), (kernel, cc)


def test_describe_covers_every_public_kernel():
    capability_api = {"kernel_paths", "all_paths", "caps_for_product", "portable_only", "simulate"}
    functions = {n for n in K.__all__ if n[0].islower() and n not in capability_api}
    assert functions == set(PUBLIC), "a public kernel without a PATHS entry in this table"
    kernels = all_paths()
    for name, directions in PUBLIC.items():
        assert set(directions) <= set(kernels), name
    assert set(_row_families()) <= set(kernels)
    for caps in CAPS.values():
        table = K.kernel_paths(caps)
        assert set(table) == set(kernels)


@pytest.mark.parametrize("cc", list(CAPS))
def test_chosen_paths_meet_their_needs(cc):
    caps = CAPS[cc]
    paths = all_paths()
    for kernel, row in describe(caps).items():
        needs = dict(paths[kernel])
        assert row["path"] is not None, row.get("reason")
        assert not unmet(needs[row["path"]], caps), (kernel, cc)
        for name, reasons in row["skipped"].items():
            assert reasons and unmet(needs[name], caps) == reasons, (kernel, name)
    with portable_only():
        for kernel, row in describe(caps).items():
            assert dict(paths[kernel])[row["path"]].portable, kernel


#: The fastest row path each kernel may take per architecture (the interpreter: the portable path).
EXPECTED = {
    "softmax_fwd": {80: "rows", 86: "rows", 89: "rows", 90: "tma", 100: "tma", 120: "tma", "interp": "portable"},
    "softmax_bwd": {80: "packed", 90: "packed", 120: "packed", "interp": "portable"},
    "cross_entropy": {80: "packed", 89: "packed", 90: "packed", 100: "packed", "interp": "split"},
    "layernorm_bwd": {80: "triton", 89: "triton", 90: "tma", 100: "tma", 120: "triton", "interp": "triton"},
    "rmsnorm_bwd": {80: "triton", 90: "tma", 120: "tma", "interp": "triton"},
    "geglu_fwd": {80: "fast_tanh", 120: "fast_tanh", "interp": "triton"},
    "rope_fwd": {80: "triton", 90: "triton", "interp": "triton"},
}


@pytest.mark.parametrize("kernel", list(EXPECTED))
def test_fastest_path_per_arch(kernel):
    table = {cc: describe(CAPS[cc])[kernel]["path"] for cc in EXPECTED[kernel]}
    assert table == EXPECTED[kernel]


# ------------------------------------------------------------------------------- the dispatchers' own choices
SOFTMAX_WIDTHS = [(4096, BF16), (14336, BF16), (14335, BF16), (20000, BF16), (128256, BF16), (128255, BF16),
                  (262144, BF16), (128256, torch.float32), (65536, torch.float32)]  # fmt: skip


@pytest.mark.parametrize("cc", list(CAPS))
def test_softmax_plan_stays_in_the_allowed_set(cc):
    from solkit.kernels.softmax.paths import PATHS
    from solkit.kernels.softmax.plan import plan

    caps = CAPS[cc]
    for direction in ("fwd", "bwd"):
        runs = allowed(PATHS[f"softmax_{direction}"], caps)
        for n_cols, dtype in SOFTMAX_WIDTHS:
            for name, _opts in plan(direction, n_cols, dtype, caps):
                assert name in runs or name in ("single", "split", "looped"), (cc, direction, n_cols, name)
            with portable_only():
                assert {n for n, _ in plan(direction, n_cols, dtype, caps)} <= {"single", "split", "looped"}
    if cc in (80, 86, 89):  # no TMA: the packed forward takes the vocabulary rows
        assert plan("fwd", 128256, BF16, caps)[0][0] == "packed"


def test_softmax_h200_table():
    """The H200's defaults and launch options, as tuned (configs.yaml)."""
    from solkit.kernels.softmax.plan import default_path, plan

    table = {(d, n, dt): default_path(d, n, dt, H200) for d in ("fwd", "bwd") for n, dt in SOFTMAX_WIDTHS}
    assert table == {
        ("fwd", 4096, BF16): "single", ("fwd", 14336, BF16): "rows", ("fwd", 14335, BF16): "packed",
        ("fwd", 20000, BF16): "packed", ("fwd", 128256, BF16): "tma", ("fwd", 128255, BF16): "packed",
        ("fwd", 262144, BF16): "tma", ("fwd", 128256, torch.float32): "split",
        ("fwd", 65536, torch.float32): "looped",
        ("bwd", 4096, BF16): "single", ("bwd", 14336, BF16): "single", ("bwd", 14335, BF16): "single",
        ("bwd", 20000, BF16): "packed", ("bwd", 128256, BF16): "packed", ("bwd", 128255, BF16): "packed",
        ("bwd", 262144, BF16): "packed", ("bwd", 128256, torch.float32): "split",
        ("bwd", 65536, torch.float32): "looped",
    }  # fmt: skip
    assert plan("fwd", 128256, BF16, H200)[0][1]["per_sm"] == 6
    assert plan("fwd", 262144, BF16, H200)[0][1]["per_sm"] == 3
    assert plan("fwd", 14336, BF16, H200)[0][1]["per_sm"] == 1


def test_derived_programs_per_sm():
    """Tuned on the H200 (measured there: unchanged); elsewhere from the part's registers and shared memory."""
    from solkit.kernels.softmax.packed import packed_per_sm
    from solkit.kernels.softmax.rows import rows_per_sm
    from solkit.kernels.softmax.tma import tma_per_sm

    assert tma_per_sm(H200, 6, 2, 16, 2) == 6 and packed_per_sm(H200, 4, 4) == 4 and rows_per_sm(H200, 2, 8) == 2
    # the RTX 5090: 100 KB of shared memory an SM holds five 16 KB programs (+1 KB each), not the H200's six
    assert tma_per_sm(CAPS[120], 6, 2, 16, 2) == 5
    assert tma_per_sm(CAPS[100], 6, 2, 16, 2) == 6  # 228 KB: the register budget decides, as on the H200
    assert packed_per_sm(CAPS[80], 4, 4) == 4  # 64K registers at the tuned 128 a thread
    small = caps_for_cc("8.6", sm_count=10)
    assert packed_per_sm(small.__class__(**{**small.__dict__, "regs_per_sm": 32768}), 4, 4) == 2
    assert tma_per_sm(INTERPRETER_CAPS, 6, 2, 16, 2) == 6


@pytest.mark.parametrize("cc", list(CAPS))
def test_norm_backward_plan_per_arch(cc):
    """LayerNorm at 8192 (its tuned TMA width): the TMA kernel only where the part has TMA and room for the
    stages; RMSNorm never by default; an explicit ``tma_stages`` declines on parts without TMA."""
    from solkit.kernels.common.tuned import for_width
    from solkit.kernels.norms.backward import backward_plan
    from solkit.kernels.norms.layer_norm import LAYERNORM_CONFIG
    from solkit.kernels.norms.rms_norm import RMSNORM_CONFIG

    x = torch.empty(64, 8192, dtype=BF16)
    kw = dict(block_m=None, num_warps=None, programs_per_sm=None, balanced=None, fused_reduce=None, maxnreg=None)
    with simulate(CAPS[cc]):
        ln = backward_plan(x, for_width(LAYERNORM_CONFIG, 8192), [x], tma_stages=None, entry="layernorm", **kw)
        rms = backward_plan(x, for_width(RMSNORM_CONFIG, 8192), [x], tma_stages=None, **kw)
        asked = backward_plan(x, for_width(RMSNORM_CONFIG, 8192), [x], tma_stages=3, **kw)
    tma_here = cc in (90, 100)  # sm_120: 99 KB a program, the stages need 144 KB
    assert (ln.boxes is not None) == tma_here and rms.boxes is None
    assert ln.tma_stages == (4 if tma_here else 0)
    assert ln.programs_per_sm == 1 and rms.programs_per_sm == 1
    assert (asked.boxes is not None) == (cc in (90, 100, "interp"))  # the interpreter runs what is asked by name


def test_cross_entropy_settings_per_arch():
    from solkit.kernels.cross_entropy.dispatch import CE_CONFIG, arch_config
    from solkit.kernels.cross_entropy.paths import PATHS

    def settings(cc, elem=2, user=None):
        caps = CAPS[cc]
        return arch_config(dict(CE_CONFIG), user or {}, caps, allowed(PATHS["cross_entropy"], caps), elem)

    assert settings(90) == CE_CONFIG  # the H200: as tuned
    assert settings(80)["split_skew"] == 4 and settings(80)["split_l2_prefetch"] == 0  # no bulk prefetch
    assert settings("interp")["split_skew"] == 0
    assert settings(86, elem=4)["num_stages"] == 2  # 2 x 16384 fp32 logits = 128 KB > 99 KB: one stage less
    assert settings(86, elem=4, user={"num_stages": 3})["num_stages"] == 3
    assert settings(100)["split_programs_per_sm"] == 4 and settings(100)["split_maxnreg"] == 128
    with portable_only():
        assert settings(90)["split_skew"] == 0


def test_geglu_fast_tanh_per_arch():
    from solkit.kernels.gates.paths import PATHS

    for cc in (80, 86, 89, 90, 100, 120):
        assert "fast_tanh" in allowed(PATHS["geglu_fwd"], CAPS[cc])
    assert "fast_tanh" not in allowed(PATHS["geglu_fwd"], INTERPRETER_CAPS)
    with portable_only():
        assert allowed(PATHS["geglu_bwd"], H200) == ("triton",)


# --------------------------------------------------------------------------------- the portable path, on a GPU
def _close(got, ref, dtype, scale=1.0):
    tol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype] * scale
    torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(37, 4095), (5, 14336), (3, 128256)])
def test_portable_softmax_gpu(shape, dtype):
    from softmax_helpers import assert_softmax_close, softmax_inputs

    from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward

    x = softmax_inputs(shape, dtype, "cuda")
    with portable_only():
        y = softmax_forward(x)
        dy = torch.randn_like(x)
        dx = softmax_backward(dy, y)
    assert_softmax_close(y, x)
    yd, dyd = y.double(), dy.double()
    _close(dx, yd * (dyd - (yd * dyd).sum(-1, keepdim=True)), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n_cols", [1000, 4096, 8192])
def test_portable_norms_gpu(n_cols, dtype):
    torch.manual_seed(n_cols)
    x = torch.randn(67, n_cols, device="cuda", dtype=dtype, requires_grad=True)
    r = torch.randn_like(x, requires_grad=True)
    w = (torch.rand(n_cols, device="cuda") + 0.5).to(dtype).requires_grad_()
    b = torch.randn(n_cols, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn_like(x)
    with portable_only():
        outs = {"rms": K.rmsnorm(x, w), "add": K.add_rmsnorm(x, r, w)[1], "ln": K.layernorm(x, w, b)}
        grads = {k: torch.autograd.grad(v, (x, w), dy) for k, v in outs.items()}
    xd, rd, wd, bd, dyd = (t.detach().double().requires_grad_() for t in (x, r, w, b, dy))
    refs = {
        "rms": xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd,
        "add": (xd + rd) * torch.rsqrt((xd + rd).pow(2).mean(-1, keepdim=True) + 1e-6) * wd,
        "ln": torch.nn.functional.layer_norm(xd, (n_cols,), wd, bd, 1e-5),
    }
    for k, ref in refs.items():
        _close(outs[k], ref, dtype)
        for g, gr in zip(grads[k], torch.autograd.grad(ref, (xd, wd), dyd)):
            _close(g, gr, dtype, scale=4 if g.dim() == 1 else 1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_portable_cross_entropy_gpu(dtype, softcap):
    from solkit.kernels.cross_entropy.dispatch import LAST_LAUNCH

    torch.manual_seed(1)
    logits = (torch.randn(61, 32011, device="cuda") * 3).to(dtype)
    y = torch.randint(0, 32011, (61,), device="cuda")
    y[::7] = -100
    xs = logits.clone().requires_grad_()
    with portable_only():
        loss = K.cross_entropy(xs, y, label_smoothing=0.1, softcap=softcap)
        assert LAST_LAUNCH["path"] == "two_sweep" or LAST_LAUNCH.get("skew") == 0, LAST_LAUNCH
        (grad,) = torch.autograd.grad(loss, xs)
    xd = logits.double().requires_grad_()
    z = xd if softcap is None else softcap * torch.tanh(xd / softcap)
    ref = torch.nn.functional.cross_entropy(z, y, ignore_index=-100, label_smoothing=0.1)
    (rgrad,) = torch.autograd.grad(ref, xd)
    _close(loss, ref, dtype)
    _close(grad, rgrad, dtype, scale=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_portable_fused_linear_cross_entropy_gpu(dtype):
    torch.manual_seed(2)
    h = (torch.randn(45, 96, device="cuda") / 4).to(dtype).requires_grad_()
    w = (torch.randn(5003, 96, device="cuda") / 4).to(dtype).requires_grad_()
    y = torch.randint(0, 5003, (45,), device="cuda")
    with portable_only():
        loss = K.fused_linear_cross_entropy(h, w, y, chunk_tokens=16)
        gh, gw = torch.autograd.grad(loss, (h, w))
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(hd @ wd.t(), y)
    rh, rw = torch.autograd.grad(ref, (hd, wd))
    _close(loss, ref, dtype)
    scale = 10 if dtype == torch.float32 else 0.1  # fp32: torch's GEMMs may run in TF32
    _close(gh, rh, dtype, scale=scale)
    _close(gw, rw, dtype, scale=scale)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_portable_rope_gpu(dtype):
    torch.manual_seed(3)
    q = torch.randn(2, 37, 7, 64, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(2, 37, 3, 64, device="cuda", dtype=dtype, requires_grad=True)
    theta = torch.arange(37, device="cuda")[:, None] * torch.rand(32, device="cuda")[None, :]
    cos, sin = torch.cat([theta.cos()] * 2, -1).to(dtype), torch.cat([theta.sin()] * 2, -1).to(dtype)
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    with portable_only():
        qo, ko = K.apply_rope(q, k, cos, sin)
        grads = torch.autograd.grad((qo, ko), (q, k), (dq, dk))

    def rot(t):
        t1, t2 = t[..., :32], t[..., 32:]
        return t * cos[:, None].double() + torch.cat([-t2, t1], -1) * sin[:, None].double()

    qd, kd = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    refs = (rot(qd), rot(kd))
    _close(qo, refs[0], dtype)
    _close(ko, refs[1], dtype)
    for g, r in zip(grads, torch.autograd.grad(refs, (qd, kd), (dq.double(), dk.double()))):
        _close(g, r, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_portable_gates_gpu(act, dtype):
    torch.manual_seed(4)
    g = torch.randn(29, 3001, device="cuda", dtype=dtype, requires_grad=True)
    u = torch.randn_like(g, requires_grad=True)
    dy = torch.randn_like(g)
    with portable_only():
        out = getattr(K, act)(g, u)
        grads = torch.autograd.grad(out, (g, u), dy)
    gd, ud = g.detach().double().requires_grad_(), u.detach().double().requires_grad_()
    f = torch.nn.functional
    ref = (f.silu(gd) if act == "swiglu" else f.gelu(gd, approximate="tanh")) * ud
    _close(out, ref, dtype)
    for got, r in zip(grads, torch.autograd.grad(ref, (gd, ud), dy.double())):
        _close(got, r, dtype)
