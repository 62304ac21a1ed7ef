"""One training-benchmark run of one variant, in its own process (kernel patches are process-global).

Invoked by :mod:`solkit.train.runner` as ``python -m solkit.train.worker SPEC.json`` (or under
``torchrun`` for data-parallel runs); writes its result as JSON to ``spec["result_path"]``.

What one timed step is: ``zero_grad(set_to_none=True)`` → forward + loss → backward →
``clip_grad_norm_(1.0)`` → ``AdamW.step()``: the whole optimizer step. Each step is bracketed by CUDA
events (host ``perf_counter`` plus a synchronise on the CPU), with one more event after the
backward, so forward+backward and the optimizer's share are reported too. Losses and gradient norms
stay on the device until the timed steps end (no host sync inside the loop).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    idx = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[idx]


def _stats(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {
        "median": med,
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "p10": _percentile(values, 0.1),
        "p90": _percentile(values, 0.9),
        "cv": (statistics.pstdev(values) / statistics.fmean(values)) if len(values) > 1 else 0.0,
    }


def _gemm_ceiling(torch: Any, device: Any, dtype: Any, n: int = 8192, warm: int = 150, reps: int = 150) -> float:
    """Sustained cuBLAS throughput of an n³ matmul on random data (the calibrated GEMM ceiling).

    ``warm`` back-to-back products first (about 0.2 s at n = 8192), so the clocks settle to what the
    power cap allows under continuous load, as during training; then the median of ``reps`` timed ones.
    """
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(warm):
        a @ b
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return 2 * n**3 / statistics.median(times)


def _canonical(name: str) -> str:
    """Parameter name without the wrappers that swaps and compile add, so variants compare by name."""
    return name.replace("._orig_mod", "").replace(".orig.", ".").replace("_orig_mod.", "")


def _first_compiled_step(step: Any, model: Any, prepared: Any) -> Any:
    """First step of a compiled variant with swapped kernels, falling back if compile cannot take them.

    Tries every kernel traced into the graph; on failure, the GEMM-epilogue and fused linear-CE
    kernels behind graph breaks (the ones with the most host-side logic); then every kernel behind a
    graph break. Each attempt and its error are recorded. Nothing was updated by a failed attempt:
    the optimizer step comes last in a step.
    """
    import torch._dynamo

    from solkit.train.variants import opaque_kinds, set_opaque

    plans: list[tuple[str, ...] | None] = [(), ("linear_residual", "fused_linear_ce"), None]
    for n, kinds in enumerate(plans):
        if kinds is None:
            set_opaque(model)
        elif kinds:
            set_opaque(model, kinds=kinds)
        attempt = {"opaque": opaque_kinds(model)}
        prepared.compile_attempts.append(attempt)
        try:
            result = step(0)
            attempt["ok"] = True
            prepared.opaque_kinds = opaque_kinds(model)
            prepared.kernels_opaque_to_compile = bool(prepared.opaque_kinds)
            return result
        except Exception as exc:  # noqa: BLE001 - recorded; the last plan re-raises
            attempt["ok"] = False
            attempt["error"] = f"{type(exc).__name__}: {exc}"[:3000]
            if prepared.compile_retry_reason is None:
                prepared.compile_retry_reason = attempt["error"].splitlines()[0][:500]
            if n == len(plans) - 1:
                raise
            torch._dynamo.reset()
    raise AssertionError("unreachable")


def _env(torch: Any, device: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    with contextlib.suppress(Exception):
        import triton

        env["triton"] = triton.__version__
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        import liger_kernel  # noqa: F401

        env["liger_kernel"] = version("liger_kernel")
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            from solkit.hardware.detect import detect_device

            info = detect_device(device)
            env.update(gpu=info.name, uuid=info.uuid, driver=info.driver, cuda=info.cuda_version, arch_id=info.arch_id)
        env.setdefault("gpu", torch.cuda.get_device_name(device))
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["triton_interpret"] = os.environ.get("TRITON_INTERPRET")
    return env


def _wrap_distributed(torch: Any, model: Any, mode: str, device: Any) -> Any:
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    raise ValueError(f"unknown parallel mode {mode!r}")


def _prepare_native(spec: dict[str, Any], device: Any, dtype: Any, seed: int) -> Any:
    """solkit's own Llama-style model (train/configs.yaml) with the variant's swaps and compile applied."""
    from solkit.train.config import get_config
    from solkit.train.model import build_model
    from solkit.train.variants import RunSetup, apply_variant

    cfg = get_config(spec["config"], batch=spec.get("batch"), seq=spec.get("seq"))
    model = build_model(cfg, device, dtype, seed=seed, checkpoint_layers=bool(spec.get("checkpoint")))
    gqa_native = True
    if device.type == "cuda":
        from solkit.train.model import fused_sdpa_supports_gqa, set_gqa_native

        gqa_native = fused_sdpa_supports_gqa(cfg, device, dtype)
        set_gqa_native(model, gqa_native)
    prepared = apply_variant(
        model, spec["variant"], probe=spec.get("probe", True), compile_backend=spec.get("compile_backend", "inductor")
    )
    unavailable = None
    if prepared.swaps and not any(sw.status == "ok" for sw in prepared.swaps):
        unavailable = "no swap of this variant is available: " + "; ".join(
            f"{sw.kind}: {sw.reason}" for sw in prepared.swaps
        )
    attention = "SDPA is_causal, enable_gqa=True" if gqa_native else "SDPA is_causal, k/v heads repeated"
    return RunSetup(cfg=cfg, model=model, loss=model, prepared=prepared, attention=attention, unavailable=unavailable)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    # Long on purpose: one training run (set-up, warm-up, timed steps, memory) in the order it happens.
    import torch
    import torch.distributed as dist

    from solkit.train.model import synthetic_batches
    from solkit.train.variants import swap_call_counts

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want_cuda = spec.get("device", "auto") in ("auto", "cuda") and torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if want_cuda else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    dtype = getattr(torch, DTYPES[spec.get("dtype", "bf16")])
    steps, warmup = int(spec.get("steps", 8)), int(spec.get("warmup", 3))
    seed = int(spec.get("seed", 0))
    torch.manual_seed(seed)

    t0 = time.perf_counter()
    if spec.get("hf"):
        from solkit.train.hf import prepare

        setup = prepare(spec, device, dtype, seed)
    else:
        setup = _prepare_native(spec, device, dtype, seed)
    model, prepared, cfg = setup.model, setup.prepared, setup.cfg
    if setup.unavailable:
        return {"status": "unavailable", "error": setup.unavailable, "variant": prepared.to_dict()}
    train_model = _wrap_distributed(torch, model, spec["parallel"], device) if world > 1 else setup.loss
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=float(spec.get("lr", 3e-4)), betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda"
    )
    # Rank-dependent data under data parallelism (each rank sees its own shard), else identical.
    batches = setup.batches or synthetic_batches(cfg, cfg.batch, cfg.seq, 4, seed + 1000 * rank, device)
    setup_s = time.perf_counter() - t0
    clip = float(spec.get("clip", 1.0))
    cuda = device.type == "cuda"

    grad_norms0: dict[str, float] = {}
    first_grads: dict[str, Any] = {}

    def step(i: int) -> tuple[Any, Any]:
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = train_model(x, y)
        loss.backward()
        if i == 0 and world == 1:  # per-parameter gradient norms before any update (warm-up, not timed)
            grad_norms0.clear()
            for name, p in model.named_parameters():
                if p.grad is not None:
                    grad_norms0[_canonical(name)] = float(p.grad.float().norm())
            if setup.first_grads is not None:
                first_grads.update(setup.first_grads(model))
        mid = None
        if cuda:
            mid = torch.cuda.Event(enable_timing=True)
            mid.record()
        gnorm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()
        return (loss.detach(), gnorm.detach()), mid

    losses, gnorms = [], []
    t_warm = time.perf_counter()
    for i in range(warmup):
        if i == 0 and prepared.variant.compile and prepared.swaps and not prepared.kernels_opaque_to_compile:
            (loss, gn), _ = _first_compiled_step(step, model, prepared)
        else:
            (loss, gn), _ = step(i)
        losses.append(loss)
        gnorms.append(gn)
        if i == 0:
            # The kernels must actually have run (eager mode; compiled code does not count calls).
            counts = swap_call_counts(model)
            first_loss = float(loss)
            if not prepared.variant.compile:
                for s in prepared.swaps:
                    assert s.status != "ok" or counts.get(s.kind, 0) >= s.replaced, f"{s.kind} never called"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warmup_s = time.perf_counter() - t_warm

    sampler = contextlib.nullcontext()
    if cuda and spec.get("telemetry", True):
        with contextlib.suppress(Exception):
            from solkit.hardware.telemetry import TelemetrySampler

            sampler = TelemetrySampler(device_index=device.index or 0, interval_s=0.25)
    events = []
    host = []
    with sampler:
        for i in range(warmup, warmup + steps):
            h0 = time.perf_counter()
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
            (loss, gn), mid = step(i)
            if cuda:
                end.record()
                events.append((start, mid, end))
            else:
                host.append(time.perf_counter() - h0)
            losses.append(loss)
            gnorms.append(gn)
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        step_s = [s.elapsed_time(e) / 1e3 for s, _, e in events]
        fwdbwd_s = [s.elapsed_time(m) / 1e3 for s, m, _ in events]
    else:
        step_s, fwdbwd_s = host, []
    if world > 1:  # the slowest rank sets the pace: per-step max over ranks
        t = torch.tensor(step_s, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        step_s = t.tolist()

    tokens_per_step = cfg.batch * cfg.seq  # per rank
    result: dict[str, Any] = {
        "status": "ok",
        "variant": prepared.to_dict(),
        "config": cfg.model_dump(),
        "device": str(device),
        "dtype": spec.get("dtype", "bf16"),
        "precision": f"{spec.get('dtype', 'bf16')} parameters and gradients, AdamW states in the parameter dtype "
        "(torch default), no fp32 master weights; kernels accumulate in fp32",
        "world_size": world,
        "parallel": spec.get("parallel") if world > 1 else None,
        "activation_checkpointing": bool(spec.get("checkpoint")),
        "attention": setup.attention,
        "steps": steps,
        "warmup": warmup,
        "tokens_per_step_per_rank": tokens_per_step,
        "step_time_s": _stats(step_s),
        "fwd_bwd_time_s": _stats(fwdbwd_s) if fwdbwd_s else None,
        "step_times_s": step_s,
        "tokens_per_s_per_rank": tokens_per_step / statistics.median(step_s),
        "timed_region": "zero_grad + forward + loss + backward + clip_grad_norm_ + AdamW.step (whole step)",
        "losses": [float(v) for v in losses],
        "grad_norms": [float(v) for v in gnorms],
        "param_grad_norms_step0": grad_norms0,
        "first_loss": first_loss,
        "swap_calls_first_step": counts,
        "setup_s": setup_s,
        "warmup_s": warmup_s,
        "env": _env(torch, device),
        "params": sum(p.numel() for p in model.parameters()),
        **first_grads,
    }
    if cuda:
        result["memory"] = {
            "max_allocated_bytes": torch.cuda.max_memory_allocated(device),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(device),
            "num_alloc_retries": torch.cuda.memory_stats(device).get("num_alloc_retries", 0),
        }
        if hasattr(sampler, "summary"):
            with contextlib.suppress(Exception):
                result["telemetry"] = sampler.summary()
        if spec.get("gemm_ceiling", False) and rank == 0:
            with contextlib.suppress(Exception):
                result["gemm_ceiling_flops"] = _gemm_ceiling(torch, device, dtype)
    with contextlib.suppress(Exception):
        from torch._dynamo.utils import counters

        result["graph_breaks"] = sum(counters["graph_break"].values())
    if world > 1:
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    if spec.get("device") == "cpu" or not _has_cuda():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    rank = int(os.environ.get("RANK", "0"))
    try:
        result = run(spec)
    except Exception as exc:  # noqa: BLE001 - the runner records any failure and keeps the other variants
        import torch

        oom = isinstance(exc, torch.OutOfMemoryError)
        result = {
            "status": "oom" if oom else "failed",
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    if rank == 0:
        Path(spec["result_path"]).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["status"] == "ok" else 1


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    raise SystemExit(main())
