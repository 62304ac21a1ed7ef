"""One case, one implementation: check it against an fp64 reference on fresh inputs, then time it.

Timing is solkit's own protocol (``solkit.timing.benchmark``: median and spread over trials, the L2 flushed
before every call, CUDA graphs for calls under 0.1 ms, wall clock on a CPU), over ``rotating`` input sets
drawn from other seeds than the check's. SOL = the time the op's bytes and FLOPs need at the device's
ceilings over the measured median.
"""

from __future__ import annotations

import torch

from suite.registry import DTYPES, OPS, Context, Unavailable

try:  # the ground-floor timing package; solkit.harness.timing before it existed
    from solkit.timing import benchmark
except ImportError:  # pragma: no cover - older trees
    from solkit.harness.timing import benchmark

#: Largest error allowed, relative to the reference's largest magnitude, per dtype.
TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2, "fp32": 5e-3}
CHECK_SEED, TIME_SEED = 1234, 5678


def inputs(op, shape, dtype, device, seed: int, grads: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    inp = op.make(shape, dtype, device, gen)
    if grads:
        for name in op.grads:
            inp[name].requires_grad_(True)
    return inp


def step_of(fn, op, direction: str, impl: str):
    """The timed call: the forward, or the forward and the backward of ``op.grads`` (fresh, no accumulation)."""
    if direction == "fwd" or impl == "copy":
        return lambda inp, dy: fn(inp)

    def step(inp, dy):
        y = fn(inp)
        if not dy and y.dim() > 0:
            dy.append(torch.randn_like(y))
        return torch.autograd.grad(y, [inp[g] for g in op.grads], dy[0] if dy else None)

    return step


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    scale = max(ref.abs().max().item(), 1e-6)
    return (got.double() - ref).abs().max().item() / scale


def check(step, op, ctx: Context) -> float:
    """Largest relative error of the outputs (and gradients) against the fp64 reference."""
    fresh = inputs(op, ctx.shape, ctx.dtype, ctx.device, CHECK_SEED, ctx.direction == "fwd_bwd")
    ref_in = {k: (v.detach().double() if v.is_floating_point() else v) for k, v in fresh.items()}
    if ctx.direction == "fwd":
        return rel_err(step(fresh, []).detach(), op.torch_fn(**ref_in).detach())
    for name in op.grads:
        ref_in[name].requires_grad_(True)
    dy: list[torch.Tensor] = []
    got = step(fresh, dy)
    y_ref = op.torch_fn(**ref_in)
    ref = torch.autograd.grad(y_ref, [ref_in[g] for g in op.grads], dy[0].double() if dy else None)
    return max(rel_err(g.detach(), r.detach()) for g, r in zip(got, ref, strict=True))


def sol(nbytes: float, flops: float, dtype: str, ceilings, median_ms: float) -> dict:
    if ceilings is None:
        return {}
    t = nbytes / ceilings.bandwidth
    if flops:
        unit = {"bf16": "bf16_tensor", "fp16": "fp16_tensor"}.get(dtype, "tf32_tensor")
        peak = ceilings.flops.get(unit) or ceilings.flops.get("fp32_vector")
        t = max(t, flops / peak) if peak else t
    return {"t_sol_ms": t * 1e3, "sol": t * 1e3 / median_ms}


def run_one(case, impl: str, device: torch.device, timing: dict, ceilings) -> dict:
    """The record of one implementation on one case; never raises for the implementation's own failures."""
    op = OPS[case.op]
    ctx = Context(op, case.shape, DTYPES[case.dtype], case.direction, device)
    nbytes, flops = op.cost(case.shape, ctx.dtype.itemsize, case.direction)
    rec = {"impl": impl, "bytes": nbytes, "flops": flops}
    if impl not in op.impls:
        return {**rec, "status": "skipped", "reason": f"not registered for {case.op}"}
    try:
        fn = op.impls[impl](ctx)
        step = step_of(fn, op, case.direction, impl)
        if impl != "copy":
            err, tol = check(step, op, ctx), TOLERANCE[case.dtype]
            rec.update(max_rel_err=err, tol=tol)
            if not err <= tol:
                return {**rec, "status": "wrong", "reason": f"max relative error {err:.3g} > {tol}"}
        pool = [(inputs(op, ctx.shape, ctx.dtype, device, TIME_SEED + j, case.direction == "fwd_bwd"), [])
                for j in range(max(timing["rotating"], 1) if device.type == "cuda" else 1)]  # fmt: skip
        res = benchmark(step, pool, method=timing["method"], reps=timing["reps"], trials=timing["trials"],
                        warmup=timing["warmup"], flush_l2=timing["flush_l2"], device=device)  # fmt: skip
    except Unavailable as exc:
        return {**rec, "status": "skipped", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - one implementation's failure is a row of the result
        return {**rec, "status": "error", "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    timed = {k: getattr(res, k) for k in ("median_ms", "q1_ms", "q3_ms", "iqr_ms", "min_ms", "cv", "method")}
    timed.update(reps=res.reps, trials=res.trials, l2_flushed=res.l2_flushed, high_variance=res.high_variance)
    out = {**rec, "status": "ok", **timed, "tb_s": nbytes / (res.median_ms * 1e-3) / 1e12}
    out.update(sol(nbytes, flops, case.dtype, ceilings, res.median_ms))
    return out
