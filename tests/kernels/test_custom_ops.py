"""solkit.kernels.common.ops: every public kernel is a ``solkit::`` custom op.

* ``torch.library.opcheck`` on each op, forward and backward (schema, fake tensors, autograd registration,
  AOTAutograd with dynamic shapes), on tiny odd shapes: fp32/fp16 through Triton's interpreter here, bf16 too
  on the GPU;
* the eager fast path (no dispatcher) and the registered op (under a dispatch mode) give bit-identical values
  and gradients, and a dispatch mode sees the ``solkit::`` ops;
* a Llama decoder layer of solkit's model with the solkit kernels swapped in compiles with
  ``fullgraph=True`` and no graph break, forward and backward, and matches eager.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import solkit.kernels as K
from solkit.kernels.common import ops

FP = [torch.float32, torch.float16]


def _t(*shape, dtype=torch.float32, device="cpu", grad=True, seed=0, scale=1.0, shift=0.0):
    gen = torch.Generator().manual_seed(seed + sum(shape))
    t = (torch.randn(*shape, generator=gen) * scale + shift).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


# Each case: public function, the ops it must reach, and its inputs (dtype, device) -> (args, kwargs).
CASES = {
    "rmsnorm": (K.rmsnorm, ("rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(3, 37, dtype=dt, device=dev),
                _t(37, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
    "rmsnorm_gemma": (K.rmsnorm, ("rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(2, 3, 33, dtype=dt, device=dev),
                      _t(33, dtype=dt, device=dev, seed=1), 1e-6, 1.0, "gemma"), {})),
    "add_rmsnorm": (K.add_rmsnorm, ("add_rmsnorm", "rmsnorm_bwd"), lambda dt, dev: ((_t(5, 41, dtype=dt, device=dev),
                    _t(5, 41, dtype=dt, device=dev, seed=2), _t(41, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
    "layernorm": (K.layernorm, ("layernorm", "layernorm_bwd"), lambda dt, dev: ((_t(2, 19, dtype=dt, device=dev),
                  _t(19, dtype=dt, device=dev, seed=1, shift=1.0), _t(19, dtype=dt, device=dev, seed=2)), {})),
    "layernorm_nobias": (K.layernorm, ("layernorm", "layernorm_bwd"), lambda dt, dev: ((_t(1, 23, dtype=dt,
                         device=dev), _t(23, dtype=dt, device=dev, seed=1, shift=1.0)), {})),
    "swiglu": (K.swiglu, ("glu", "glu_bwd"), lambda dt, dev: ((_t(3, 37, dtype=dt, device=dev),
               _t(3, 37, dtype=dt, device=dev, seed=1)), {})),
    "geglu": (K.geglu, ("glu", "glu_bwd"), lambda dt, dev: ((_t(2, 1, 29, dtype=dt, device=dev),
              _t(2, 1, 29, dtype=dt, device=dev, seed=1)), {})),
    "softmax": (K.softmax, ("softmax", "softmax_bwd"), lambda dt, dev: ((_t(3, 37, dtype=dt, device=dev),), {})),
    "softmax_dim0": (K.softmax, ("softmax", "softmax_bwd"), lambda dt, dev: ((_t(5, 3, dtype=dt, device=dev), 0),
                     {})),
    "rope": (K.apply_rope, ("rope", "rope_bwd"), lambda dt, dev: ((_t(1, 3, 2, 16, dtype=dt, device=dev),
             _t(1, 3, 1, 16, dtype=dt, device=dev, seed=1), _t(3, 16, device=dev, grad=False, seed=2),
             _t(3, 16, device=dev, grad=False, seed=3)), {})),
    "rope_pos_bhsd": (K.apply_rope, ("rope", "rope_bwd"), lambda dt, dev: ((_t(2, 2, 3, 8, dtype=dt, device=dev),
                      _t(2, 1, 3, 8, dtype=dt, device=dev, seed=1), _t(7, 8, device=dev, grad=False, seed=2),
                      _t(7, 8, device=dev, grad=False, seed=3), torch.tensor([[4, 0, 6], [1, 2, 3]], device=dev)),
                      {"layout": "bhsd", "interleaved": True})),
    "fused_linear_residual": (K.fused_linear, ("gemm",), lambda dt, dev: ((_t(2, 5, 24, dtype=dt, device=dev),
                              _t(40, 24, dtype=dt, device=dev, seed=1, scale=0.2), None,
                              _t(2, 5, 40, dtype=dt, device=dev, seed=2)), {})),
    "gemm_bias_silu": (K.gemm, ("gemm",), lambda dt, dev: ((_t(7, 24, dtype=dt, device=dev),
                       _t(24, 24, dtype=dt, device=dev, seed=1, scale=0.2), _t(24, dtype=dt, device=dev, seed=2)),
                       {"activation": "silu", "alpha": 0.5})),
    "cross_entropy": (K.cross_entropy, ("cross_entropy",), lambda dt, dev: ((_t(5, 67, dtype=dt,
                      device=dev), torch.tensor([3, -100, 66, 0, 9], device=dev)), {"inplace_grad": False})),
    "cross_entropy_none": (K.cross_entropy, ("cross_entropy",), lambda dt, dev: ((_t(3, 45, dtype=dt,
                           device=dev), torch.tensor([1, 44, 2], device=dev)), {"reduction": "none", "softcap": 5.0,
                           "label_smoothing": 0.1, "z_loss_scale": 1e-3, "inplace_grad": False})),
    "fused_linear_cross_entropy": (K.fused_linear_cross_entropy, ("fused_linear_cross_entropy",),
                                   lambda dt, dev: ((_t(6, 16, dtype=dt, device=dev), _t(50, 16, dtype=dt, device=dev,
                                   seed=1, scale=0.3), torch.tensor([1, 49, -100, 3, 3, 0], device=dev),
                                   _t(50, dtype=dt, device=dev, seed=2)), {"chunk_tokens": 4})),
}  # fmt: skip


class _Capture(TorchDispatchMode):
    """Passes every op through, recording the ``solkit::`` calls (so :func:`ops.traced` is true under it)."""

    def __init__(self):
        super().__init__()
        self.calls: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "solkit":
            self.calls.append((func, args))
        return out


def _run(fn, args, kwargs):
    out = fn(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    diff = [o for o in outs if o.requires_grad]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad(diff, leaves, [torch.ones_like(o) for o in diff])
    return [o.detach() for o in outs] + list(grads)


def _check_op(name, dtype, device):
    """The public function on the eager fast path and through the dispatcher (under a dispatch mode): the same
    values and gradients bit for bit, the forward and backward ops seen; then opcheck on every op call seen."""
    fn, names, make = CASES[name]
    args, kwargs = make(dtype, device)
    fast = _run(fn, args, kwargs)
    capture = _Capture()
    with capture:
        traced = _run(fn, args, kwargs)
    assert {f._opname for f, _ in capture.calls} == set(names)
    for a, b in zip(fast, traced, strict=True):
        assert torch.equal(a, b)
    for func, call_args in capture.calls:
        differentiable = ops.KERNEL_OPS[func._opname].backward is not None
        leaves = tuple(
            a.detach().requires_grad_(a.requires_grad and differentiable) if isinstance(a, torch.Tensor) else a
            for a in call_args
        )
        # A backward op is checked under AOTAutograd inside its forward op's check (the joint graph).
        utils = None if differentiable else ("test_schema", "test_faketensor")
        torch.library.opcheck(func, leaves, **({} if utils is None else {"test_utils": utils}))


#: On the CPU (interpreted launches, each opcheck runs the op about ten times) the costlier cases run in one dtype,
#: alternating so each family sees fp32 and fp16; on the GPU every case runs in every dtype.
CPU_ONE_DTYPE = {
    "rmsnorm_gemma": torch.float16, "layernorm": torch.float32, "geglu": torch.float16,
    "softmax_dim0": torch.float16, "rope": torch.float32, "fused_linear_residual": torch.float32,
    "gemm_bias_silu": torch.float16, "cross_entropy": torch.float32, "fused_linear_cross_entropy": torch.float16,
}  # fmt: skip
#: Variants of an op checked above (same op, other arguments) whose interpreted launches take seconds: GPU only.
GPU_ONLY = {"layernorm_nobias", "rope_pos_bhsd"}


@pytest.mark.parametrize("dtype", FP, ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name, dtype):
    if name in GPU_ONLY:
        pytest.skip(f"{name}: a variant of an op checked here; its slow interpreted launches run on the GPU only")
    if CPU_ONE_DTYPE.get(name, dtype) != dtype:
        pytest.skip(f"{name}: {CPU_ONE_DTYPE[name]} only in the interpreter (slow launches); all dtypes on the GPU")
    _check_op(name, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*FP, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_gpu(name, dtype):
    _check_op(name, dtype, "cuda")


def test_no_grad_call_saves_nothing():
    """Without a gradient to come, the forward op is asked for no rstd (an empty extra output)."""
    x, w = _t(4, 32, grad=False), _t(32, grad=False)
    y, rstd = torch.ops.solkit.rmsnorm(x, w, 1e-6, 0.0, "llama", ops.grad_wanted(x, w))
    assert rstd.numel() == 0 and y.shape == x.shape


def test_options_json_round_trip():
    cfg = {"split_block": 0, "num_warps": 4}
    assert ops.options(ops.options_json(cfg)) == cfg and ops.options(None) is None


# ------------------------------------------------------------------------------------------ torch.compile
def _solkit_model(device="cpu", dtype=torch.float32, seq=8, batch=1, **shape):
    """solkit's Llama model (one layer) with every solkit swap applied; probes skipped: the kernels' own tests
    cover their values."""
    from solkit.train import variants as V
    from solkit.train.config import get_config
    from solkit.train.model import build_model

    model = build_model(get_config("tiny", seq=seq, batch=batch, layers=1, **shape), device, dtype, seed=0)
    prepared = V.apply_variant(model, "solkit", probe=False)
    assert prepared.complete, prepared.unavailable
    model.reset_rope(seq)
    return model


def _recording_backend(graphs: list, seen: dict):
    """AOTAutograd with compilers that record the ops of the forward and backward graphs, run as traced."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def recorder(kind):
        def compile_graph(gm, _inputs):
            seen[kind] |= {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
            return make_boxed_func(gm.forward)

        return compile_graph

    aot = aot_autograd(fw_compiler=recorder("fw"), bw_compiler=recorder("bw"))

    def backend(gm, inputs):
        graphs.append(gm)
        return aot(gm, inputs)

    return backend


def test_decoder_layer_compiles_to_one_graph():
    """The solkit decoder layer compiles with fullgraph=True (a graph break would raise) into one graph whose
    forward holds the solkit ops and whose backward (AOTAutograd through the ops' autograd formulas) holds their
    backward ops; forward and backward equal eager."""
    model = _solkit_model(hidden=32, intermediate=64, heads=2, kv_heads=1, head_dim=16, vocab=64)
    layer, cos, sin = model.layers[0], model.rope_cos, model.rope_sin
    h = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(0))

    def fwd_bwd(fn):
        x = h.clone().requires_grad_(True)
        out = fn(x, cos, sin)
        grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()])
        return [out.detach(), *grads]

    graphs: list = []
    seen: dict = {"fw": set(), "bw": set()}
    torch._dynamo.reset()
    got = fwd_bwd(torch.compile(layer, backend=_recording_backend(graphs, seen), fullgraph=True))
    assert len(graphs) == 1
    fw = {"solkit.rmsnorm.default", "solkit.rope.default", "solkit.glu.default", "solkit.gemm.default"}
    assert fw <= seen["fw"], seen["fw"]
    assert {"solkit.rmsnorm_bwd.default", "solkit.rope_bwd.default", "solkit.glu_bwd.default"} <= seen["bw"]
    for g, w in zip(got, fwd_bwd(layer), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_decoder_layer_inductor_gpu():
    """On the GPU with Inductor: a bf16 layer of the tiny config, fullgraph, one graph, forward and backward close
    to eager."""
    model = _solkit_model("cuda", torch.bfloat16, seq=64, batch=2)
    layer, cos, sin = model.layers[0], model.rope_cos, model.rope_sin
    h = torch.randn(2, 64, model.cfg.hidden, device="cuda", dtype=torch.bfloat16)
    assert torch._dynamo.explain(layer)(h, cos, sin).graph_break_count == 0

    def fwd_bwd(fn):
        x = h.clone().requires_grad_(True)
        out = fn(x, cos, sin)
        (gx,) = torch.autograd.grad(out.float().square().sum(), [x])
        return out.detach().float(), gx.float()

    want = fwd_bwd(layer)
    got = fwd_bwd(torch.compile(layer, fullgraph=True))
    torch.testing.assert_close(got[0], want[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got[1], want[1], rtol=5e-2, atol=5e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter check: the stand-in timer replaces GPU timing")
def test_autotuner_runs_inside_a_compiled_graph(monkeypatch, tmp_path):
    """solkit.tune's autotuner picks the GEMM's config at run time inside a compiled graph (the op is opaque to
    Dynamo, so the tuner runs on real tensors): the H200's decode list is timed once (a stand-in timer whose
    winner is the smallest BLOCK_K), the winner launched and recorded, and a second call re-uses it."""
    from solkit.kernels.common.capability import caps_for_product, simulate
    from solkit.kernels.gemm import dispatch as G
    from solkit.tune.engine import Evaluator

    monkeypatch.setenv("SOLKIT_TUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("SOLKIT_GEMM_TUNER", raising=False)
    timed: list[dict] = []

    def stand_in(self, ev):
        timed.append(dict(ev.config))
        ev.time_ms = 1.0 + ev.config["BLOCK_K"] / 1000 + ev.config.get("SPLIT_K", 1) / 1e4
        ev.timing = {"median_ms": ev.time_ms, "method": "stand-in"}

    monkeypatch.setattr(Evaluator, "_time", stand_in)
    tuners: dict = {}
    make = G._autotuner.__wrapped__  # a fresh tuner, not the process-wide cached one
    monkeypatch.setattr(
        G, "_autotuner", lambda family, regime: tuners.setdefault((family, regime), make(family, regime))
    )
    gen = torch.Generator().manual_seed(0)
    x, w, r = (torch.randn(*s, generator=gen).half() for s in ((17, 64), (48, 64), (17, 48)))
    fn = torch.compile(lambda x, w, r: K.fused_linear(x, w, None, r), backend="aot_eager", fullgraph=True)
    with simulate(caps_for_product("h200-sxm")):
        y = fn(x, w, r)
        assert timed and G.LAST_LAUNCH["regime"] == "decode"
        want = min(timed, key=lambda c: (c["BLOCK_K"], c.get("SPLIT_K", 1)))
        assert all(G.LAST_LAUNCH["config"][k] == want[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        n_timed = len(timed)
        fn(x, w, r)
        assert len(timed) == n_timed  # the bucket's winner, nothing timed again
    torch.testing.assert_close(y.float(), G.reference(x, w, residual=r), atol=2e-2, rtol=1e-2)
