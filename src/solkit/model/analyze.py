"""``solkit.model.analyze``: measure one step of a model and score every operator against T_SOL.

1. The real step runs ``warmup`` times (compiling it first under ``compile=True``).
2. The step is traced on meta tensors (no memory, milliseconds): every op's FLOPs by math unit and
   bytes, with parameters, buffers and the optimizer's state (as the warm-up left it) as inputs
   (:mod:`solkit.model.work`). Then it runs ``steps`` more times, each under its own torch.profiler
   session with each module's forward in a named range (:mod:`solkit.model.scope`).
3. Each kernel's time (CPU op time on a CPU) goes to the op or Inductor region that launched it
   (:mod:`solkit.model.attribute`), and each is scored: T_SOL, SOL fraction, tier, the time lost to
   SOL, grouped per operator, module type and layer (:mod:`solkit.model.report`). The report is the
   median step's (by measured time); operators are ranked by their median time lost over all the
   profiled steps, with its spread and ties (:mod:`solkit.model.ranking`).
"""

from __future__ import annotations

import contextlib
import datetime
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.model.attribute import attribute
from solkit.model.clocks import INTERVAL_S as CLOCK_INTERVAL_S
from solkit.model.clocks import StepClocks
from solkit.model.ranking import STEPS
from solkit.model.report import ModelReport, add_steps, build_report
from solkit.model.scope import module_scopes
from solkit.model.step import OptimizerArg, check_mode, describe, make_optimizer, real_step
from solkit.model.whatif import add_what_if
from solkit.model.work import step_work
from solkit.sol.model import Ceilings
from solkit.zoo import Built


def as_built(model: torch.nn.Module, example_inputs: Any, labels: torch.Tensor | None = None) -> Built:
    """A model and its example inputs (a tensor, a tuple of arguments or a dict of keyword arguments)."""
    if isinstance(example_inputs, Built):
        return example_inputs
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, dict):
        args, kwargs = (), dict(example_inputs)
    else:
        args, kwargs = tuple(example_inputs), {}
    return Built(model, args, kwargs, labels, "module", None, None, type(model).__name__)


def _device_of(model: torch.nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_checked(step: Callable[[], Any], what: str) -> None:
    try:
        step()
    except SolkitError:
        raise
    except Exception as e:  # the user's model failed on its inputs: one line, not a traceback
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SolkitError(f"the model failed in its {what}: {type(e).__name__}: {first[:300]}") from None


def _inductor_meta():
    """Inductor annotates each kernel's profiler range with its boundary bytes (kernel_num_gb)."""
    import torch._inductor.config as inductor_config

    return inductor_config.patch(benchmark_kernel=True)


def _versions() -> dict[str, str]:
    out = {"torch": torch.__version__, "python": platform.python_version()}
    with contextlib.suppress(ImportError):
        import transformers

        out["transformers"] = transformers.__version__
    with contextlib.suppress(ImportError):
        import triton

        out["triton"] = triton.__version__
    return out


def _ceilings(device: torch.device, arch: str | None, basis: str, ceilings: Ceilings | None) -> Ceilings:
    if ceilings is not None:
        return ceilings
    from solkit.sol.ceilings import get_ceilings

    return get_ceilings(arch, basis)


def analyze(
    model: torch.nn.Module,
    example_inputs: Any = (),
    *,
    labels: torch.Tensor | None = None,
    mode: str = "fwd_bwd",
    compile: bool = False,
    warmup: int = 2,
    steps: int = STEPS,
    arch: str | None = None,
    basis: str = "spec",
    precision: str | None = None,
    ceilings: Ceilings | None = None,
    what_if: Sequence[str] | None = None,
    optimizer: OptimizerArg = None,
    progress: Callable[[str], None] | None = None,
) -> ModelReport:
    """Measure one step of ``model`` on ``example_inputs`` in ``mode`` and score each operator against T_SOL.

    ``example_inputs``: a tensor, a tuple of positional arguments, a dict of keyword arguments or a
    :class:`solkit.zoo.Built`. ``labels`` are passed as ``labels=`` (Hugging Face models then return
    their loss); without them the backward starts from the sum of the first output. ``mode``: ``fwd``
    (under no_grad), ``fwd_bwd`` or ``train_step`` (plus an AdamW step). ``compile``: run the step
    through ``torch.compile``. ``steps``: profiled steps (each operator's time lost is ranked by its median over
    them, with its min-max spread; the report's totals are the median step's). T_SOL is on ``ceilings``, else on
    ``arch``/``basis`` (default: the present device's datasheet); ``precision``: ``fastest`` or ``as_written``
    (the analysis' policy).
    ``optimizer`` (``train_step``): a ``torch.optim.Optimizer`` on the model's parameters, a function of the
    parameters returning one, or an AdamW implementation by name (``default``: AdamW as PyTorch makes it,
    multi-tensor on CUDA; ``foreach``, ``fused``, ``for-loop``). Its ops count under the module type
    ``optimizer``. ``what_if``: product ids (``solkit hw list``) to put every operator's work on
    (:mod:`solkit.model.whatif`).
    """
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    check_mode(mode)
    if steps < 1:
        raise SolkitError(f"steps={steps}: profile at least one step")
    built = as_built(model, example_inputs, labels)
    device = _device_of(built.model)
    on_gpu = device.type == "cuda"
    ceil = _ceilings(device, arch, basis, ceilings)
    opt = None
    if mode == "train_step":
        opt = make_optimizer([p for p in built.model.parameters() if p.requires_grad], optimizer)
    runner = torch.compile(built.model) if compile else None
    step = real_step(built, mode, runner, opt)
    plain, t_after_warmup, work, profiled = _measure(step, built, device, mode=mode, precision=precision, opt=opt,
                                                     compile=compile, warmup=warmup, steps=steps, say=say)  # fmt: skip
    say("attributing kernels to operators")
    attributed = []
    for events, wall, clocks in profiled:
        stats: dict[str, Any] = {}
        rows, measured = attribute(events, work, on_gpu, wall_s=wall, stats=stats)
        attributed.append((measured, rows, wall, clocks, stats))
    del profiled
    # the report is the median step's (by measured time); every step's rows give each operator's spread
    measured, rows, wall, clocks, device_stats = sorted(attributed, key=lambda a: a[0])[(len(attributed) - 1) // 2]
    meta = {
        **_run_meta(built, device, ceil, mode=mode, compile=compile, precision=precision, opt=opt),
        "traced_ops": len(work.ops),
        "steps_measured_ms": [a[0] * 1e3 for a in attributed],
        "steps_wall_ms": [a[2] * 1e3 for a in attributed],
        **({"device_events": device_stats} if device_stats else {}),
        **({"telemetry": clocks.summary} if clocks is not None else {}),
    }
    rep = build_report(rows, measured, ceil, meta)
    add_steps(rep, [a[1] for a in attributed])
    rep.clocks = clocks
    if what_if:
        from solkit.report.crossarch import product_ids

        add_what_if(rep, product_ids(what_if, "what_if"))
    rep.wall_s = wall
    # what the analysis adds to running the step once: the trace, every profiled step and its profiler's slow-down
    # and post-processing, the attribution
    rep.overhead_s = max(time.perf_counter() - t_after_warmup - plain, 0.0)
    rep.meta["step_s"] = plain
    rep.meta["total_s"] = time.perf_counter() - t0
    return rep


def _run_meta(built: Built, device: torch.device, ceil: Ceilings, **run: Any) -> dict[str, Any]:
    """What was run, where and on what basis (``run``: mode, compile, precision, opt)."""
    opt = run["opt"]
    return {
        "model": built.description,
        "family": built.family,
        "mode": run["mode"],
        "compile": run["compile"],
        "device": _device_meta(device),
        "arch": ceil.arch,
        "basis": ceil.basis,
        "precision": run["precision"] or "fastest",
        "optimizer": describe(opt) if opt is not None else None,
        "tokens": built.tokens,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "time_source": "GPU kernel time (torch.profiler / CUPTI)"
        if device.type == "cuda"
        else "CPU op time (torch.profiler)",
    }


def _measure(step: Callable[[], Any], built: Built, device: torch.device, *, mode: str, precision: str | None,
             opt: Any, compile: bool, warmup: int, steps: int,
             say: Callable[[str], None]) -> tuple[float, float, Any, list]:  # fmt: skip
    """Warm up (two steps at least when compiling), trace the step's work on meta tensors and profile ``steps``
    steps; returns the last warm-up step's time, when the warm-up ended, the work and the profiled steps."""
    with _inductor_meta() if compile else contextlib.nullcontext():
        for i in range(max(warmup, 2 if compile else 1)):
            say(f"warm-up step {i + 1}" + (" (compiling)" if compile and i == 0 else ""))
            t_step = time.perf_counter()
            _run_checked(step, "warm-up step" if i else "first step (check the example inputs)")
            _sync(device)
            plain = time.perf_counter() - t_step  # the last warm-up step: the step's own time
        # traced after the warm-up: the optimizer's state exists, as in the profiled step
        say("tracing the step on meta tensors")
        t_after_warmup = time.perf_counter()
        work = step_work(built, mode, precision, opt)
        profiled = []
        for i in range(steps):
            say(f"profiling step {i + 1} of {steps}")
            profiled.append(_profile(step, built.model, device, scopes=not compile))
    return plain, t_after_warmup, work, profiled


def _profile(
    step: Callable[[], Any], model: torch.nn.Module, device: torch.device, scopes: bool
) -> tuple[list, float, StepClocks | None]:
    """The profiled step's events and wall time, and on a GPU the SM clock and power sampled while it ran."""
    from torch.profiler import ProfilerActivity, profile

    from solkit.hardware.telemetry import TelemetrySampler

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    ctx = module_scopes(model) if scopes else contextlib.nullcontext()
    on_gpu = device.type == "cuda"
    index = device.index if device.index is not None else (torch.cuda.current_device() if on_gpu else 0)
    sampler = TelemetrySampler(index, interval_s=CLOCK_INTERVAL_S) if on_gpu else contextlib.nullcontext()
    with profile(activities=acts, record_shapes=True) as prof, ctx, sampler:
        start = time.monotonic()
        t = time.perf_counter()
        _run_checked(step, "profiled step")
        _sync(device)
        wall = time.perf_counter() - t
    events = list(prof.events())
    return events, wall, StepClocks.of(sampler, start, events) if on_gpu else None


def _device_meta(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"kind": "cuda", "name": props.name, "memory_gb": round(props.total_memory / 2**30, 1)}
    import os

    return {"kind": "cpu", "name": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
