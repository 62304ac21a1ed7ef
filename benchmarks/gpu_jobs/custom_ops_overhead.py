"""Per-call host overhead of solkit's custom ops (docs/kernels/custom_ops.md), JSON to --out.

Two parts:

* ``glue`` (any device; the CPU numbers in the doc): a no-op probe op (``solkit_probe::noop``, returns two fresh
  tensors, the shape of a norm's forward) called five ways: its implementation directly; through a plain
  ``torch.autograd.Function`` (what each kernel was before it became an op); the :class:`KernelOp` eager fast path;
  and the registered op through the dispatcher (what every call would pay without the fast path); without and
  with a gradient wanted (forward only: the cost of building the autograd node, no backward run);
* ``ops`` (CUDA only): each public kernel at a tiny shape, the launcher called directly (the floor: no autograd
  at all), the public function (the fast path), and the op through the dispatcher, with no gradient; then the
  public function forward + backward against the dispatcher's (a passthrough dispatch mode makes every call of
  the public function, backward included, go through the dispatcher).

Wall clock over ``--calls`` calls after ``--warmup``, best of ``--repeats`` (for the glue, rounds interleaving the
ways), synchronised at the ends: at these shapes the GPU work is a few microseconds, so this is the host's cost
per call.

    python benchmarks/gpu_jobs/custom_ops_overhead.py --device cpu --out results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _per_call_us(fn, calls: int, warmup: int, repeats: int, sync) -> float:
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return round(best * 1e6, 2)


class _Passthrough(TorchDispatchMode):
    """Any dispatch mode makes :func:`solkit.kernels.common.ops.traced` true: every call goes to the dispatcher."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def glue(device: str, timing: dict) -> dict:
    from solkit.kernels.common.ops import KernelOp

    def impl(x: torch.Tensor, w: torch.Tensor, eps: float, flag: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(x), x.new_empty(x.shape[0], dtype=torch.float32)

    def fake(x, w, eps, flag):
        return torch.empty_like(x), x.new_empty(x.shape[0], dtype=torch.float32)

    def setup(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0], inputs[1], output[1])

    def backward(ctx, dy, _):
        x, w, _r = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w), None, None

    op = KernelOp("noop", impl, fake, backward=backward, setup_context=setup, namespace="solkit_probe")

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, eps, flag):
            out = impl(x, w, eps, flag)
            setup(ctx, (x, w, eps, flag), out)
            return out

        @staticmethod
        def backward(ctx, dy, dr):
            return backward(ctx, dy, dr)

    def ways(grad: bool) -> dict:
        x = torch.randn(4, 8, device=device, requires_grad=grad)
        w = torch.randn(8, device=device, requires_grad=grad)
        return {
            "impl": lambda: impl(x, w, 1e-6, grad),
            "autograd_function": lambda: Function.apply(x, w, 1e-6, grad),
            "kernel_op_fast_path": lambda: op(x, w, 1e-6, grad),
            "dispatcher": lambda: op.overload(x, w, 1e-6, grad),
        }

    out = {}
    for grad in (False, True):
        fns = ways(grad)
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(timing["repeats"]):  # rounds interleave the ways, so a busy spell hits them all alike
            for k, f in fns.items():
                best[k] = min(best[k], _per_call_us(f, **{**timing, "repeats": 1}))
        out["grad" if grad else "no_grad"] = best
    return out


def ops_on_gpu(timing: dict) -> dict:
    import solkit.kernels as K
    from solkit.kernels.cross_entropy.dispatch import cross_entropy_forward
    from solkit.kernels.cross_entropy.fused_linear import fused_linear_cross_entropy_forward
    from solkit.kernels.gates.glu import gated_forward
    from solkit.kernels.gemm import dispatch as gemm_launcher
    from solkit.kernels.norms.layer_norm import layernorm_forward_stats
    from solkit.kernels.norms.rms_norm import rmsnorm_forward
    from solkit.kernels.rope.rotary import rope_forward
    from solkit.kernels.softmax.dispatch import softmax_forward

    dev, dt = "cuda", torch.bfloat16

    def t(*shape, dtype=dt):
        return torch.randn(*shape, device=dev, dtype=dtype)

    x, r, w, b = t(4, 256), t(4, 256), t(256), t(256)
    wm, q, k, cos, sin = t(256, 256), t(1, 4, 4, 64), t(1, 4, 2, 64), t(4, 64, dtype=torch.float32), t(4, 64)
    logits, targets = t(4, 512), torch.randint(0, 512, (4,), device=dev)
    t256 = targets % 256
    S = torch.ops.solkit
    cases = {  # name: (public call, launcher call, dispatcher call, inputs wanting a gradient)
        "rmsnorm": (lambda: K.rmsnorm(x, w), lambda: rmsnorm_forward(x, w, 1e-6, save_rstd=False),
                    lambda: S.rmsnorm(x, w, 1e-6, 0.0, "llama", False), (x, w)),
        "add_rmsnorm": (lambda: K.add_rmsnorm(x, r, w),
                        lambda: rmsnorm_forward(x, w, 1e-6, residual=r, save_rstd=False),
                        lambda: S.add_rmsnorm(x, r, w, 1e-6, 0.0, "llama", False), (x, r, w)),
        "layernorm": (lambda: K.layernorm(x, w, b), lambda: layernorm_forward_stats(x, w, b, 1e-5, save_stats=False),
                      lambda: S.layernorm(x, w, b, 1e-5, False), (x, w, b)),
        "softmax": (lambda: K.softmax(x), lambda: softmax_forward(x), lambda: S.softmax(x), (x,)),
        "swiglu": (lambda: K.swiglu(x, r), lambda: gated_forward(x, r, "silu"), lambda: S.glu(x, r, "silu"), (x, r)),
        "geglu": (lambda: K.geglu(x, r), lambda: gated_forward(x, r, "gelu_tanh"),
                  lambda: S.glu(x, r, "gelu_tanh"), (x, r)),
        "apply_rope": (lambda: K.apply_rope(q, k, cos, sin), lambda: rope_forward(q, k, cos, sin),
                       lambda: S.rope(q, k, cos, sin, None, False, "bshd"), (q, k)),
        "gemm": (lambda: K.gemm(x, wm), lambda: gemm_launcher.gemm(x, wm),
                 lambda: S.gemm(x, wm, None, None, 1.0, 1.0, "none", None, None), (x, wm)),
        "fused_linear": (lambda: K.fused_linear(x, wm, None, r), lambda: gemm_launcher.gemm(x, wm, None, r),
                         lambda: S.gemm(x, wm, None, r, 1.0, 1.0, "none", None, None), (x, wm, r)),
        "cross_entropy": (lambda: K.cross_entropy(logits, targets), lambda: cross_entropy_forward(logits, targets),
                          lambda: S.cross_entropy(logits, targets, -100, 0.0, 0.0, None, "mean", False, None),
                          (logits,)),
        "fused_linear_cross_entropy": (
            lambda: K.fused_linear_cross_entropy(x, wm, t256),
            lambda: fused_linear_cross_entropy_forward(x, wm, t256, need_grads=(False, False, False)),
            lambda: S.fused_linear_cross_entropy(x, wm, t256, None, -100, 0.0, 0.0, None, "mean", 4096, False, False,
                                                 False, None), (x, wm)),
    }  # fmt: skip
    sync = torch.cuda.synchronize
    out = {}
    for name, (public, launcher, dispatcher, grad_inputs) in cases.items():
        row = {}
        try:
            with torch.no_grad():
                row["launcher_us"] = _per_call_us(launcher, sync=sync, **timing)
                row["public_us"] = _per_call_us(public, sync=sync, **timing)
                row["dispatcher_us"] = _per_call_us(dispatcher, sync=sync, **timing)
            for g in grad_inputs:
                g.requires_grad_(True)

            def fwd_bwd(public=public):
                o = public()
                (o[0] if isinstance(o, tuple) else o).float().sum().backward()

            def fwd_bwd_dispatched(fwd_bwd=fwd_bwd):
                with _Passthrough():
                    fwd_bwd()

            row["public_fwd_bwd_us"] = _per_call_us(fwd_bwd, sync=sync, **timing)
            row["dispatcher_fwd_bwd_us"] = _per_call_us(fwd_bwd_dispatched, sync=sync, **timing)
        except Exception as exc:  # noqa: BLE001 - one failing op is a result, the others still run
            row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        finally:
            for g in grad_inputs:
                g.requires_grad_(False)
                g.grad = None
        out[name] = row
        print(name, row, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    timing = dict(calls=args.calls, warmup=args.warmup, repeats=args.repeats)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
    except OSError:
        commit = None
    result = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "triton": __import__("triton").__version__},
        "commit": commit,
        "command": " ".join(sys.argv),
        "timing": {**timing, "statistic": "best of repeats, wall clock per call, synchronised"},
    }  # fmt: skip
    for part, fn in (("glue", lambda: glue(args.device, {**timing, "sync": sync})),
                     ("ops", (lambda: ops_on_gpu(timing)) if args.device == "cuda" else None)):  # fmt: skip
        if fn is None:
            continue
        try:
            result[part] = fn()
        except Exception as exc:  # noqa: BLE001 - one failing part must not lose the other
            result[part] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        print(part, json.dumps(result[part], indent=1), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
