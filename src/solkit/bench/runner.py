"""Run the suite: every problem x workload x backend, checked, timed and scored against SOL.

For each workload:
1. the work (FLOPs by math unit, fused bytes) comes from SOL analysis of the reference;
2. the reference runs once in higher precision (fp32 on a GPU with TF32 off, fp64 on the CPU) and
   once eagerly in the problem's dtype, which gives PyTorch's own same-dtype error;
3. each backend runs on fresh copies of the same inputs; it is correct when every output has the
   reference's shape and dtype, no NaN/Inf where the reference has none, and a max error at most
   2x PyTorch's own error plus a small atol;
4. it is timed with solkit.timing (median of reps x trials, L2 flushed, a rotating pool of
   input sets, CUDA graphs for calls under 100 us), and scored on both bases.

A backend that fails becomes a row with its error; it never stops the run. A backend that raises
:class:`~solkit.errors.SolkitError` (a kernel with no path that runs on this device, say) makes the row
``unavailable`` with that one-line reason.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from solkit.backends import BACKENDS, MUTATES_INPUTS
from solkit.errors import SolkitError
from solkit.problems.loader import Problem, load_problem
from solkit.scale import device_identity
from solkit.sol.model import Ceilings, sol_fraction, t_sol
from solkit.sol.tiers import tier_for
from solkit.timing import benchmark

SUITE_ROOT = Path(__file__).resolve().parents[1] / "problems" / "suite"
SIZES = ("s", "m", "l")
MODES = ("fwd", "bwd", "fwd_bwd")


@dataclass
class Row:
    problem: str
    op_type: str
    mode: str
    workload: str
    size: str
    model: str
    axes: dict[str, int]
    backend: str
    status: str  # ok | incorrect | error | unavailable
    error: str | None = None
    ms: float | None = None
    timing: dict[str, Any] | None = None
    flops: dict[str, float] = field(default_factory=dict)
    flops_total: float = 0.0
    fused_bytes: float = 0.0
    work_source: str = ""
    tflops: float | None = None
    tbs: float | None = None
    bound: str | None = None
    t_sol_ms_spec: float | None = None
    t_sol_ms_calibrated: float | None = None
    sol_spec: float | None = None
    sol_calibrated: float | None = None
    sol_violation: bool = False
    speedup_vs_eager: float | None = None
    tier: str | None = None
    advice: str | None = None
    max_abs_error: float | None = None
    eager_abs_error: float | None = None
    peak_memory_mb: float | None = None
    diagnosis: str | None = None
    device_uuid: str | None = None  # the card (or CPU) it was timed on: rows compare only within one
    device_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchConfig:
    device: str
    sizes: tuple[str, ...] = ("s",)
    ops: tuple[str, ...] | None = None
    backends: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None
    dtype: str | None = None  # override of the floating dtype, e.g. "float16"
    models: tuple[str, ...] | None = None  # only workloads taken from these models
    reps: int | None = None
    trials: int = 3
    cooldown_ms: float = 0.0  # GPU idle before every timed call (solkit.timing.benchmark's cooldown_ms)
    suite_root: Path = SUITE_ROOT


def suite_problems(root: Path = SUITE_ROOT) -> list[Problem]:
    return [load_problem(d) for d in sorted(p for p in root.iterdir() if (p / "definition.json").exists())]


def problem_mode(problem: Problem) -> str:
    hints = problem.definition.solkit
    return ((hints.model_extra or {}) if hints else {}).get("mode", "fwd")


def workload_meta(workload) -> dict[str, str]:
    extra = workload.model_extra or {}
    return extra.get("solkit") or {}


def select(problems: Iterable[Problem], cfg: BenchConfig) -> list[tuple[Problem, Any]]:
    problems = list(problems)
    chosen = []
    # --ops tokens name problems; a token that names no problem selects an op type (e.g. "rmsnorm_bwd"
    # is one problem, "attention" every attention problem).
    names = {p.definition.name for p in problems}
    wanted = set(cfg.ops or ())
    by_name, by_op = wanted & names, wanted - names
    modes = set(cfg.modes or MODES)
    if "bwd" in modes:  # backward problems are timed together with their forward (fwd_bwd)
        modes.add("fwd_bwd")
    for p in problems:
        name, op = p.definition.name, p.definition.op_type
        if cfg.ops and name not in by_name and op not in by_op:
            continue
        if problem_mode(p) not in modes:
            continue
        for w in p.workloads:
            meta = workload_meta(w)
            if meta.get("size", "l") in cfg.sizes and (not cfg.models or meta.get("model") in cfg.models):
                chosen.append((p, w))
    return chosen


def _upcast(values: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in values.items()}


def cast_floats(values: dict[str, Any], dtype: torch.dtype | None) -> dict[str, Any]:
    return values if dtype is None else _upcast(values, dtype)


def clone_values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _outputs(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _max_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return (a.double() - ref.double()).abs().max().item() if a.numel() else 0.0


@dataclass
class Expected:
    """What every backend of one workload is checked against, computed once per workload."""

    eager: tuple[torch.Tensor, ...]  # the reference, eager, in the problem's dtype
    hi: tuple[torch.Tensor, ...]  # the reference in higher precision
    eager_err: list[float]  # PyTorch's own max error per output
    atol: list[float]  # one ULP of the output dtype at the output's largest magnitude
    hi_finite: list[bool]


def expected(eager, hi) -> Expected:
    errs, atols, finite = [], [], []
    for e, h in zip(eager, hi):
        errs.append(_max_err(e, h))
        scale = h.double().abs().max().item() if h.numel() else 0.0
        # The small atol is one unit in the last place of the output dtype at the output's largest
        # magnitude: rounding the same exact value differently may always cost that much.
        ulp = torch.finfo(e.dtype).eps if e.is_floating_point() else 0.0
        atols.append(1e-12 + ulp * scale)
        finite.append(bool(torch.isfinite(h).all()) if h.is_floating_point() else True)
    return Expected(tuple(eager), tuple(hi), errs, atols, finite)


def check(outs, exp: Expected) -> tuple[bool, float, float, str | None]:
    """Correctness of ``outs`` against the high-precision reference, relative to eager's error."""
    if len(outs) != len(exp.hi):
        return False, math.inf, 0.0, f"returned {len(outs)} outputs, expected {len(exp.hi)}"
    worst, worst_eager = 0.0, 0.0
    for i, (o, e, h) in enumerate(zip(outs, exp.eager, exp.hi)):
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(e.shape):
            return False, math.inf, 0.0, f"output {i}: shape {getattr(o, 'shape', None)} != {tuple(e.shape)}"
        if o.dtype != e.dtype:
            return False, math.inf, 0.0, f"output {i}: dtype {o.dtype} != {e.dtype}"
        if o.is_floating_point() and exp.hi_finite[i] and not torch.isfinite(o).all():
            return False, math.inf, 0.0, f"output {i}: NaN/Inf where the reference is finite"
        err, eerr, atol = _max_err(o, h), exp.eager_err[i], exp.atol[i]
        if err > 2 * eerr + atol:
            return False, err, eerr, f"output {i}: max error {err:.3g} > 2 x PyTorch's {eerr:.3g} + {atol:.2g}"
        worst, worst_eager = max(worst, err), max(worst_eager, eerr)
    return True, worst, worst_eager, None


def workload_work(problem: Problem, workload, dtype: str | None = None) -> tuple[dict[str, float], float, str]:
    """FLOPs by unit and fused bytes of one workload (SOL analysis of the reference), with its floating inputs in
    ``dtype`` when the run casts them (``--dtype``), so the bytes and the math unit are those the run executes."""
    from solkit.sol.analysis import analyze_workload

    a = analyze_workload(problem, workload, dtype=getattr(torch, dtype) if dtype else None).analysis
    source = "declared in definition" if a.declared else f"SOL analysis of the reference (precision {a.precision})"
    if dtype:
        source += f", inputs as {dtype}"
    if a.uncounted:
        source += f" (uncounted ops: {', '.join(a.uncounted)})"
    return {u: float(v) for u, v in a.flops.items()}, float(a.fused_bytes), source


def _pool_size(inputs: dict[str, Any], device: str) -> int:
    nbytes = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
    budget = 1.5 * 2**30 if device.startswith("cuda") else 256 * 2**20
    return int(max(1, min(4, budget // max(nbytes, 1))))


def row_base(problem: Problem, workload, device: str | None) -> dict[str, Any]:
    """The fields every row of one workload shares, the identity of ``device`` included (None: left empty)."""
    meta = workload_meta(workload)
    ident = device_identity(device) if device else {"uuid": None, "name": None}
    return dict(
        problem=problem.definition.name,
        op_type=problem.definition.op_type or "",
        mode=problem_mode(problem),
        workload=workload.uuid,
        size=meta.get("size", ""),
        model=meta.get("model", ""),
        axes=problem.resolve_axes(workload),
        device_uuid=ident["uuid"],
        device_name=ident["name"],
    )


def run_workload(
    problem: Problem,
    workload,
    cfg: BenchConfig,
    ceilings: dict[str, Ceilings],
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    # Long on purpose: the per-workload protocol (inputs, fp64 reference, each backend checked then timed) in its order.
    from solkit.harness.inputs import InputFactory

    d = problem.definition
    base = row_base(problem, workload, cfg.device)
    names = cfg.backends or tuple(BACKENDS)
    rows: list[Row] = []
    try:
        flops, nbytes, source = workload_work(problem, workload, cfg.dtype)
    except Exception as exc:  # noqa: BLE001 - analysis gaps must not stop the bench
        flops, nbytes, source = {}, 0.0, f"analysis failed: {type(exc).__name__}: {exc}"
    dev = torch.device(cfg.device)
    override = getattr(torch, cfg.dtype) if cfg.dtype else None
    ref = problem.reference_fn()
    try:
        factory = InputFactory(problem, dev)
        inputs = cast_floats(factory.generate(workload, 0), override)
        hi_dtype = torch.float64 if dev.type == "cpu" else torch.float32
        prev_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            hi = _outputs(ref(*_upcast(clone_values(inputs), hi_dtype).values()))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
        exp = expected(_outputs(ref(*clone_values(inputs).values())), hi)
        pool = [inputs] + [
            cast_floats(factory.generate(workload, t), override) for t in range(1, _pool_size(inputs, cfg.device))
        ]
        # Every backend is checked on copies of these untouched values: a backend that writes into its
        # inputs while being timed (Liger's in-place RoPE) must not change what the next one is checked on.
        pristine = clone_values(inputs)
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: every backend row says so
        msg = f"reference failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return [Row(**base, backend=b, status="error", error=msg) for b in names]
    eager_ms = None
    for bname in names:
        backend = BACKENDS[bname]
        row = Row(**base, backend=bname, status="ok", flops=flops, fused_bytes=nbytes, work_source=source)
        row.flops_total = float(sum(flops.values()))
        ok, why = backend.available(cfg.device)
        fn = backend.make(d.name, ref) if ok else None
        if fn is None:
            row.status, row.error = "unavailable", why if not ok else "no implementation for this problem"
            rows.append(row)
            continue
        if progress:
            progress(f"{d.name} [{row.size}/{row.model}] {bname}")
        try:
            outs = _outputs(fn(*clone_values(pristine).values()))
            good, err, eerr, why = check(outs, exp)
            row.max_abs_error, row.eager_abs_error = err, eerr
            if not good:
                row.status, row.error = "incorrect", why
                rows.append(row)
                continue
            del outs
            mutates = (bname, d.name) in MUTATES_INPUTS
            args = [tuple((clone_values(p) if mutates else p).values()) for p in pool]
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base_mem = torch.cuda.memory_allocated()
                fn(*args[0])
                torch.cuda.synchronize()
                row.peak_memory_mb = (torch.cuda.max_memory_allocated() - base_mem) / 2**20
            reps = cfg.reps or (50 if dev.type == "cuda" else 5)
            r = benchmark(fn, args, reps=reps, trials=cfg.trials, device=dev, warmup=3 if dev.type == "cuda" else 1,
                          cooldown_ms=cfg.cooldown_ms)  # fmt: skip
            row.ms, row.timing = r.median_ms, r.to_dict()
            if not mutates and _restore(pool[0], pristine):
                row.error = "note: wrote into its input buffers while being timed (inputs restored)"
            if bname == "eager":
                eager_ms = r.median_ms
            _score(row, ceilings)
        except SolkitError as exc:  # the kernel says it cannot serve this device or shape: a reason, not a crash
            row.status, row.error = "unavailable", unavailable_reason(exc)
        except Exception as exc:  # noqa: BLE001 - a crashing backend becomes a row
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            row.status, row.error = "error", f"{type(exc).__name__}: {first}"[:300]
            row.diagnosis = traceback.format_exc(limit=3)[-800:]
        rows.append(row)
    for row in rows:
        if row.ms and eager_ms:
            row.speedup_vs_eager = eager_ms / row.ms
    return rows


def unavailable_reason(exc: SolkitError) -> str:
    """The one line a kernel gives when no path of it runs here (``"<kernel>: no path runs on <device>: ..."``)."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _restore(values: dict[str, Any], pristine: dict[str, Any]) -> bool:
    """Put back any input tensor that differs from its pristine copy; True if one did."""
    changed = False
    for k, v in values.items():
        if isinstance(v, torch.Tensor) and not torch.equal(v, pristine[k]):
            v.copy_(pristine[k])
            changed = True
    return changed


def _score(row: Row, ceilings: dict[str, Ceilings]) -> None:
    t = row.ms * 1e-3
    row.tflops = row.flops_total / t / 1e12 if row.flops_total else None
    row.tbs = row.fused_bytes / t / 1e12 if row.fused_bytes else None
    for basis, c in ceilings.items():
        try:
            res = t_sol(row.flops, row.fused_bytes, c)
        except Exception:  # noqa: BLE001 - a unit this arch lacks: leave the basis empty
            continue
        if res.t_sol_s <= 0:
            continue
        score = sol_fraction(res.t_sol_s, t)
        setattr(row, f"t_sol_ms_{basis}", res.t_sol_ms)
        setattr(row, f"sol_{basis}", score.sol_fraction)  # capped at 1; violations are flagged
        row.sol_violation |= score.violation
        row.bound = row.bound or res.bound
    frac = row.sol_calibrated if row.sol_calibrated is not None else row.sol_spec
    if frac is not None:
        tier = tier_for(min(frac, 1.0), row.bound or "memory")
        row.tier, row.advice = tier.label, tier.advice


def run_suite(cfg: BenchConfig, ceilings: dict[str, Ceilings], progress=None, on_row=None) -> list[Row]:
    rows: list[Row] = []
    chosen = select(suite_problems(cfg.suite_root), cfg)
    for i, (problem, workload) in enumerate(chosen):
        t0 = time.perf_counter()
        new = run_workload(problem, workload, cfg, ceilings, progress=progress)
        rows += new
        if on_row:
            on_row(i + 1, len(chosen), new, time.perf_counter() - t0)
        if cfg.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows
