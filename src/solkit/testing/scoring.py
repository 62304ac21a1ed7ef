"""One SOL measurement of a callable: time it with solkit's protocol, score it against T_SOL.

:func:`measure` is what the pytest ``sol`` fixture calls (:mod:`solkit.testing.plugin`); it is plain
Python, usable outside pytest. The work comes either from the caller (``flops=``, ``bytes=``, with the
math unit from ``dtype=``) or from the FLOP/byte analysis of a SOL-ExecBench problem (``problem=``).
The ceilings are the present device's: its calibration when one is cached, else the datasheet; a CPU
has no datasheet, so there a (quick) calibration is run and the basis says so. A measured time below
T_SOL is a violation (the counts or the timer are wrong): it is flagged and scored 1, never above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError


@dataclass
class SolRecord:
    """The result of one :func:`measure`: time statistics, the work, T_SOL and the SOL fraction."""

    name: str
    stats: dict[str, Any]
    flops: dict[str, float]
    bytes: float
    t_sol_ms: float
    sol_fraction: float
    raw_fraction: float
    violation: bool
    bound: str
    basis: str
    basis_notes: list[str]
    device: dict[str, Any]
    work_source: str  # "given" or "problem <name> workload <uuid>"
    noisy: bool = False
    floor: float | None = None
    passed: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return float(self.stats["median_ms"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unit_of(dtype: Any) -> str:
    """The math unit charged with the FLOPs of ``dtype`` (a torch dtype or a name such as ``"bf16"``)."""
    from solkit.hardware.specs import DTYPE_TO_TENSOR_UNIT, resolve_dtype

    return DTYPE_TO_TENSOR_UNIT[resolve_dtype(str(dtype).removeprefix("torch."))]


def _first_float_dtype(args: Sequence[Any]) -> Any:
    for a in args:
        if getattr(a, "is_floating_point", None) and a.is_floating_point():
            return a.dtype
    return None


def given_work(flops: float | Mapping[str, float] | None, nbytes: float | None, dtype: Any, args: Sequence[Any]):
    """FLOPs by unit and bytes from the caller's numbers; a bare FLOP count goes to ``dtype``'s unit
    (default: the dtype of the first floating-point tensor argument)."""
    if flops is None and nbytes is None:
        raise SolkitError("sol(): give flops= and/or bytes=, or problem= to take them from a problem's analysis")
    if isinstance(flops, Mapping):
        by_unit = {str(u): float(v) for u, v in flops.items()}
    elif flops:
        dtype = dtype if dtype is not None else _first_float_dtype(args)
        if dtype is None:
            raise SolkitError("sol(): flops= needs dtype= (no floating-point tensor argument to take it from)")
        by_unit = {unit_of(dtype): float(flops)}
    else:
        by_unit = {}
    return by_unit, float(nbytes or 0.0)


def _pick_workload(problem: Any, workload: str | int | None, args: Sequence[Any]):
    wls = problem.workloads
    if not wls:
        raise SolkitError(f"{problem.name}: the problem has no workloads")
    if isinstance(workload, int):
        return wls[workload]
    if isinstance(workload, str):
        for w in wls:
            if w.uuid == workload:
                return w
        raise SolkitError(f"{problem.name}: no workload {workload!r}; have {', '.join(w.uuid for w in wls)}")
    if len(wls) == 1:
        return wls[0]
    shapes = [tuple(a.shape) for a in args if hasattr(a, "shape")]
    matches = [w for w in wls if [s for s in problem.input_shapes(w).values() if s is not None] == shapes]
    if len(matches) == 1:
        return matches[0]
    raise SolkitError(
        f"{problem.name}: {len(matches) or 'no'} workloads match the argument shapes {shapes}; "
        f"pass workload= (a uuid or an index): {', '.join(w.uuid for w in wls)}"
    )


def problem_work(problem: str | Path | Any, workload: str | int | None, args: Sequence[Any]):
    """FLOPs by unit and fused bytes from the analysis of one workload of a SOL-ExecBench problem."""
    from solkit.problems.loader import load_problem
    from solkit.sol.analysis import analyze_workload

    prob = load_problem(problem) if isinstance(problem, (str, Path)) else problem
    w = _pick_workload(prob, workload, args)
    a = analyze_workload(prob, w).analysis
    return {u: float(v) for u, v in a.flops.items()}, float(a.fused_bytes), f"problem {prob.name} workload {w.uuid}"


def device_ceilings(basis: str = "auto"):
    """The present device and its ceilings: ``auto`` is the cached calibration when there is one,
    else the datasheet (on a CPU, which has none, a quick calibration)."""
    from solkit.hardware.calibrate import load_cached
    from solkit.hardware.detect import detect_device
    from solkit.sol.ceilings import calibrated_ceilings, get_ceilings

    info = detect_device()
    cal = load_cached(info)
    if basis == "auto":
        basis = "calibrated" if cal is not None else "spec"
    if basis == "calibrated":
        ceilings = calibrated_ceilings(quick=True, cal=cal, info=info)
    else:
        ceilings = get_ceilings(None, basis)
    cal = cal or load_cached(info)
    label = ceilings.basis + (" (quick)" if ceilings.basis == "calibrated" and cal is not None and cal.quick else "")
    return info, ceilings, label


def measure(
    fn: Callable[..., Any],
    *args: Any,
    flops: float | Mapping[str, float] | None = None,
    bytes: float | None = None,  # noqa: A002 - the fixture's documented keyword
    dtype: Any = None,
    problem: str | Path | Any = None,
    workload: str | int | None = None,
    name: str = "",
    basis: str = "auto",
    timing: Mapping[str, Any] | None = None,
    env: tuple | None = None,
) -> SolRecord:
    """Time ``fn(*args)`` and score it against T_SOL on the present device (see the module docstring).

    ``timing`` goes to :func:`solkit.timing.benchmark` (``reps``, ``trials``, ``method``...); ``env`` is
    a precomputed ``(device info, ceilings, basis label)`` from :func:`device_ceilings`.
    """
    from solkit.sol.model import sol_fraction, t_sol
    from solkit.timing import benchmark

    if problem is not None and (flops is not None or bytes is not None):
        raise SolkitError("sol(): give either problem= or flops=/bytes=, not both")
    if problem is not None:
        by_unit, nbytes, source = problem_work(problem, workload, args)
    else:
        by_unit, nbytes = given_work(flops, bytes, dtype, args)
        source = "given"
    info, ceilings, label = env or device_ceilings(basis)
    sol = t_sol(by_unit, nbytes, ceilings)
    result = benchmark(fn, [tuple(args)] if args else None, **dict(timing or {}))
    score = sol_fraction(sol.t_sol_s, result.median_ms * 1e-3)
    return SolRecord(
        name=name or getattr(fn, "__name__", "fn"),
        stats=result.to_dict(),
        flops=by_unit,
        bytes=nbytes,
        t_sol_ms=sol.t_sol_ms,
        sol_fraction=score.sol_fraction,
        raw_fraction=score.raw_fraction,
        violation=score.violation,
        bound=sol.bound,
        basis=label,
        basis_notes=list(ceilings.notes),
        device={"kind": info.kind, "name": info.name, "arch": ceilings.arch},
        work_source=source,
        noisy=bool(result.high_variance),
    )


def check_floor(record: SolRecord, floor: float) -> str | None:
    """Set ``record.floor``/``passed``; return why it failed (None when it passed).

    A violation fails a floor: the score of a time below T_SOL says nothing about the kernel."""
    record.floor = float(floor)
    if record.violation:
        why = (
            f"{record.name}: measured {record.median_ms:.4g} ms is below T_SOL {record.t_sol_ms:.4g} ms "
            f"({record.basis}): a SOL violation, so the FLOPs/bytes or the timer are wrong; floor {floor} not checked"
        )
    elif record.sol_fraction < floor:
        why = (
            f"{record.name}: SOL fraction {record.sol_fraction:.3g} is below the floor {floor} "
            f"(median {record.median_ms:.4g} ms, T_SOL {record.t_sol_ms:.4g} ms, {record.bound}-bound, "
            f"basis {record.basis}{', noisy timing' if record.noisy else ''})"
        )
    else:
        why = None
    record.passed = why is None
    return why
