# Over 500 lines: analyze() and the problem analysis build one Analysis, and consumers import both from here.
"""Automatic speed-of-light analysis of a PyTorch reference.

``analyze(fn, *inputs)`` traces ``fn`` on meta tensors (no storage is allocated, see
:mod:`solkit.sol.trace`), counts each op's FLOPs by math unit and its bytes
(:mod:`solkit.sol.counting`), and sums them:

* ``flops``: unit -> FLOPs over all ops; ``flops_total`` their sum;
* ``fused_bytes``: every tensor crossing the boundary of ``fn``, once, at its own dtype: each
  distinct tensor input read once (for an ``nn.Module`` its parameters and buffers too, and any
  tensor a closure captures), each distinct output written once, and inputs written in place or
  gradients left in ``.grad`` (Python scalars count nothing): the "total fused bytes" of a kernel
  that does the whole reference in one pass. A cast inside ``fn`` (``x.float()``) is never
  materialised by such a kernel, so it costs no fused bytes;
* ``unfused_bytes``: the sum over ops of the bytes each reads and writes (views move nothing):
  what an op-by-op execution moves;
* ``uncounted``: names of ops no rule knows (their FLOPs are unknown, never silently zero).

T_SOL = max over units of FLOPs/peak, and fused_bytes/bandwidth (:func:`solkit.sol.model.t_sol`).
Which unit matrix work is charged to follows the precision policy (``precision="fastest"`` by
default, or ``"as_written"``; :mod:`solkit.sol.precision`), and every result says which.

The per-op view (each op's FLOPs, bytes and the boundary tensors it reads, parameters by name) and
the boundary bytes of any group of ops are in :mod:`solkit.sol.opview`.

``analyze_problem(problem)`` does this for every workload of a SOL-ExecBench problem. A
definition may declare its own work in a ``"solkit"`` key, evaluated per workload over its axes
(and scalar inputs) with the safe expression evaluator of :mod:`solkit.problems.expr`::

    "solkit": {"flops": {"bf16_tensor": "2*M*N*K"}, "bytes": "2*(M*K + K*N + M*N)"}

Declared values win; the traced ones are kept, and both are reported when they differ by > 1 %.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from solkit.errors import SolkitError
from solkit.sol.counting import OpCount, count_ops
from solkit.sol.model import Ceilings, SolResult, t_sol
from solkit.sol.precision import DEFAULT_RTOL, Precision, parse_precision
from solkit.sol.trace import BoundaryTensor, OpTrace, TensorMeta, trace

#: Relative difference above which declared and traced counts are both reported.
DISAGREEMENT = 0.01


@dataclass(frozen=True)
class ShapeSpec:
    """A tensor described by shape and dtype only (never allocated)."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    requires_grad: bool = False

    def to_meta(self) -> torch.Tensor:
        t = torch.empty(tuple(int(s) for s in self.shape), dtype=self.dtype, device="meta")
        return t.requires_grad_(True) if self.requires_grad else t


def _is_shape(x: Any) -> bool:
    return isinstance(x, (tuple, list, torch.Size)) and all(isinstance(s, int) and not isinstance(s, bool) for s in x)


def _is_spec(x: Any) -> bool:
    if isinstance(x, ShapeSpec):
        return True
    return isinstance(x, tuple) and len(x) == 2 and _is_shape(x[0]) and isinstance(x[1], torch.dtype)


def as_meta_input(x: Any) -> Any:
    """An example input -> what the traced function receives.

    ``ShapeSpec`` and ``(shape, dtype)`` pairs become meta tensors; tensors on any device become
    meta tensors of the same shape, dtype and strides; anything else is passed unchanged.
    """
    if isinstance(x, ShapeSpec):
        return x.to_meta()
    if _is_spec(x):
        return ShapeSpec(tuple(x[0]), x[1]).to_meta()
    return x


@dataclass
class OpSummary:
    """All calls of one op (with one dominant unit) added up."""

    op: str
    count: int
    flops: int
    flops_by_unit: dict[str, int]
    bytes: int
    unit: str
    counted: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "count": self.count,
            "flops": self.flops,
            "flops_by_unit": dict(self.flops_by_unit),
            "bytes": self.bytes,
            "unit": self.unit,
            "counted": self.counted,
            "note": self.note,
        }


def summarize(calls: Iterable[OpCount]) -> list[OpSummary]:
    """Group op calls by (op, unit), in order of first appearance."""
    groups: dict[tuple[str, str, bool], OpSummary] = {}
    for c in calls:
        key = (c.op, c.unit, c.counted)
        s = groups.get(key)
        if s is None:
            groups[key] = OpSummary(c.op, 1, c.flops_total, dict(c.flops), c.bytes, c.unit, c.counted, c.note)
            continue
        s.count += 1
        s.flops += c.flops_total
        s.bytes += c.bytes
        for u, f in c.flops.items():
            s.flops_by_unit[u] = s.flops_by_unit.get(u, 0) + f
        if s.note != c.note:
            s.note = s.note if s.note.endswith("(first call)") else f"{s.note} (first call)"
    return list(groups.values())


@dataclass
class Analysis:
    """FLOPs by unit, fused and unfused bytes, and the per-op breakdown of one traced call."""

    ops: list[OpSummary]
    calls: list[OpCount]
    flops: dict[str, int]
    fused_bytes: int
    unfused_bytes: int
    uncounted: list[str]
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    allow_tf32: bool
    precision: str = "fastest"
    conv_tf32: bool = True
    rtol: float = DEFAULT_RTOL
    boundary: list[BoundaryTensor] = field(default_factory=list)  # the inputs, named (parameters by name)
    written: list[BoundaryTensor] = field(default_factory=list)  # inputs written in place, gradients in .grad
    trace: OpTrace | None = field(default=None, repr=False)  # the records behind ``calls`` (same order)
    traced_flops: dict[str, int] = field(default_factory=dict)
    traced_fused_bytes: int = 0
    declared: dict[str, Any] = field(default_factory=dict)  # {"flops": {...}, "bytes": int} when overridden
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sol: SolResult | None = None

    @property
    def flops_total(self) -> int:
        return sum(self.flops.values())

    def t_sol(self, ceilings: Ceilings) -> SolResult:
        """T_SOL of this work (FLOPs by unit, fused bytes) on ``ceilings``."""
        return t_sol(self.flops, self.fused_bytes, ceilings)

    def sol_for(self, arch: str | None = None, basis: str = "spec") -> SolResult:
        """T_SOL on ``arch`` (default: the present device) and ``basis`` ("spec" or "calibrated")."""
        from solkit.sol.ceilings import get_ceilings

        return self.t_sol(get_ceilings(arch, basis))

    def per_arch(self, archs: Iterable[str] | None = None) -> dict[str, SolResult]:
        """T_SOL on the datasheet basis of every arch in the hardware database (or ``archs``).

        An arch without a unit this work needs (fp8 on an A100) is left out.
        """
        from solkit.hardware.specs import list_specs
        from solkit.sol.ceilings import spec_ceilings

        ids = list(archs) if archs is not None else [s.id for s in list_specs()]
        out: dict[str, SolResult] = {}
        for arch in ids:
            c = spec_ceilings(arch)
            if all(c.flops.get(u) for u, f in self.flops.items() if f):
                out[arch] = self.t_sol(c)
        return out

    def with_precision(self, basis: str) -> Analysis:
        """The same trace counted on another precision basis (same TF32 switches, tolerance, declared counts)."""
        if self.trace is None:
            raise SolkitError("this analysis carries no trace to recount")
        old = Precision.current(self.precision, self.allow_tf32, self.conv_tf32, self.rtol)
        a = _analysis_from_trace(self.trace, replace(old, basis=parse_precision(basis)))
        a.notes = list(self.notes)
        if self.declared:
            apply_declared(a, self.declared.get("flops"), self.declared.get("bytes"))
        return a

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "flops_total": self.flops_total,
            "flops": dict(self.flops),
            "fused_bytes": self.fused_bytes,
            "unfused_bytes": self.unfused_bytes,
            "uncounted": list(self.uncounted),
            "precision": self.precision,
            "allow_tf32": self.allow_tf32,
            "conv_tf32": self.conv_tf32,
            "inputs": [_boundary_dict(b) for b in self.boundary] or [_tensor_dict(t) for t in self.inputs],
            "outputs": [_tensor_dict(t) for t in self.outputs],
            "ops": [s.to_dict() for s in self.ops],
        }
        if self.written:
            d["written"] = [_boundary_dict(b) for b in self.written]
        if self.declared:
            d["declared"] = dict(self.declared)
            d["traced"] = {"flops": dict(self.traced_flops), "fused_bytes": self.traced_fused_bytes}
        if self.disagreements:
            d["disagreements"] = list(self.disagreements)
        if self.notes:
            d["notes"] = list(self.notes)
        if self.sol is not None:
            d.update(_sol_dict(self.sol))
        return d


def _tensor_dict(t: TensorMeta) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "bytes": t.nbytes}


def _boundary_dict(b: BoundaryTensor) -> dict[str, Any]:
    return {"name": b.name, "kind": b.kind, **_tensor_dict(b.meta)}


def _sol_dict(r: SolResult) -> dict[str, Any]:
    return {
        "t_sol_ms": r.t_sol_ms,
        "t_compute_ms": r.t_compute_s * 1e3,
        "t_memory_ms": r.t_memory_s * 1e3,
        "bound": r.bound,
        "arch": r.arch,
        "basis": r.basis,
        "arithmetic_intensity": r.arithmetic_intensity,
    }


def _analysis_from_trace(tr: OpTrace, p: Precision) -> Analysis:
    calls = count_ops(tr.records, precision=p)
    flops: dict[str, int] = {}
    for c in calls:
        for u, f in c.flops.items():
            if f:
                flops[u] = flops.get(u, 0) + f
    uncounted: list[str] = []
    for c in calls:
        if not c.counted and c.op not in uncounted:
            uncounted.append(c.op)
    fused = sum(t.nbytes for t in tr.inputs) + sum(t.nbytes for t in tr.outputs)
    fused += sum(b.meta.nbytes for b in tr.written)
    notes = _gather_only_inputs(tr)
    return Analysis(
        ops=summarize(calls),
        calls=calls,
        flops=flops,
        fused_bytes=fused,
        unfused_bytes=sum(c.bytes for c in calls),
        uncounted=uncounted,
        inputs=list(tr.inputs),
        outputs=list(tr.outputs),
        allow_tf32=p.matmul_tf32,
        precision=p.basis,
        conv_tf32=p.conv_tf32,
        rtol=p.rtol,
        boundary=list(tr.boundary),
        written=list(tr.written),
        trace=tr,
        traced_flops=dict(flops),
        traced_fused_bytes=fused,
        notes=notes,
    )


def _gather_only_inputs(tr) -> list[str]:
    """Notes for inputs read only through gathers (an embedding table): fused_bytes charges all of them.

    A kernel that gathers reads just the selected rows, so T_SOL from fused_bytes can then exceed
    what such a kernel needs; the note gives the bytes actually selected.
    """
    from solkit.sol.counting import rule_table

    ops = rule_table()["ops"]
    notes = []
    for i, (meta, ident) in enumerate(zip(tr.inputs, tr.input_ids)):
        readers = [r for r in tr.records if ident in r.input_ids]
        if not readers:
            continue
        gathers = [r for r in readers if ops.get(r.name, {}).get("kind") == "gather" and r.input_ids[0] == ident]
        if len(gathers) != len(readers):
            continue
        selected = sum(t.nbytes for r in gathers for t in r.outputs)
        if selected < meta.nbytes:
            notes.append(
                f"input {i} ({meta!r}, {meta.nbytes} B) is only gathered ({selected} B selected); fused_bytes charges "
                "all of it, so T_SOL may exceed what a gathering kernel needs"
            )
    return notes


def analyze(
    fn: Callable[..., Any],
    *example_inputs: Any,
    arch: str | None = None,
    basis: str = "spec",
    allow_tf32: bool | None = None,
    ceilings: Ceilings | None = None,
    precision: str = "fastest",
    conv_tf32: bool | None = None,
    rtol: float | None = None,
    module: torch.nn.Module | None = None,
    **kwargs: Any,
) -> Analysis:
    """Trace ``fn(*example_inputs, **kwargs)`` without allocating tensors and count its work.

    Inputs may be tensors (any device; only their metadata is used), :class:`ShapeSpec` objects,
    ``(shape, dtype)`` pairs, or plain Python values passed through unchanged. Tensors that require
    grad let ``fn`` run a backward pass (``torch.autograd.grad`` works on meta tensors). ``fn`` may be
    an ``nn.Module`` (its parameters and buffers are inputs) or a closure over one (pass it as
    ``module`` to name its tensors). ``precision`` (``"fastest"`` or ``"as_written"``), ``allow_tf32``
    (default: ``torch.backends.cuda.matmul.allow_tf32``), ``conv_tf32`` (default:
    ``torch.backends.cudnn.allow_tf32``) and ``rtol`` (default: SOL-ExecBench's 1e-2) decide the unit of
    matrix work (:mod:`solkit.sol.precision`). With ``ceilings`` or ``arch``, ``.sol`` holds T_SOL on
    that arch and basis.
    """
    p = Precision.current(precision, matmul_tf32=allow_tf32, conv_tf32=conv_tf32, rtol=rtol)
    args, kw = tree_map(as_meta_input, (example_inputs, kwargs), is_leaf=_is_spec)
    a = _analysis_from_trace(trace(fn, *args, module=module, **kw), p)
    if ceilings is not None:
        a.sol = a.t_sol(ceilings)
    elif arch is not None:
        a.sol = a.sol_for(arch, basis)
    return a


def apply_declared(
    a: Analysis, flops: Mapping[str, int | float] | None = None, fused_bytes: int | float | None = None
) -> Analysis:
    """Let declared counts win over traced ones; note each disagreement above 1 %."""
    if flops:
        declared = {u: int(round(v)) for u, v in flops.items()}
        traced_total, declared_total = sum(a.traced_flops.values()), sum(declared.values())
        if _differs(declared_total, traced_total):
            pct = _pct(declared_total, traced_total)
            a.disagreements.append(f"flops: declared {declared_total:.4g} vs traced {traced_total:.4g} ({pct})")
        a.flops = declared
        a.declared["flops"] = dict(declared)
    if fused_bytes is not None:
        b = int(round(fused_bytes))
        if _differs(b, a.traced_fused_bytes):
            a.disagreements.append(
                f"bytes: declared {b:.4g} vs traced {a.traced_fused_bytes:.4g} ({_pct(b, a.traced_fused_bytes)})"
            )
        a.fused_bytes = b
        a.declared["bytes"] = b
    return a


def _differs(x: float, y: float) -> bool:
    return abs(x - y) > DISAGREEMENT * max(abs(x), abs(y)) if (x or y) else False


def _pct(declared: float, traced: float) -> str:
    return f"{(declared - traced) / traced * 100:+.1f}% vs traced" if traced else "traced is 0"


# ----------------------------------------------------------------------------------------------
# SOL-ExecBench problems


@dataclass
class WorkloadAnalysis:
    """The analysis of one workload of a problem."""

    uuid: str
    axes: dict[str, int]
    analysis: Analysis
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        a = self.analysis
        d: dict[str, Any] = {"problem": self.problem, "uuid": self.uuid, "axes": dict(self.axes)}
        body = a.to_dict()
        for key in ("flops_total", "flops", "fused_bytes", "unfused_bytes"):
            d[key] = body.pop(key)
        d["precision"] = body.pop("precision")
        if a.sol is not None:
            for key in ("t_sol_ms", "bound", "arch", "basis"):
                d[key] = body.pop(key)
        d["uncounted"] = body.pop("uncounted")
        d.update(body)
        return d


def _scalar_default(dtype: torch.dtype) -> bool | int | float:
    if dtype == torch.bool:
        return False
    return 1.0 if dtype.is_floating_point else 1


def workload_inputs(problem, workload) -> list[Any]:
    """The reference's positional inputs for ``workload``: ShapeSpecs and Python scalars."""
    shapes = problem.input_shapes(workload)
    dtypes = problem.input_dtypes()
    scalars = problem.scalar_values(workload)
    out: list[Any] = []
    for name in problem.definition.inputs:
        shape = shapes[name]
        if shape is None:
            out.append(scalars.get(name, _scalar_default(dtypes[name])))
        else:
            out.append(ShapeSpec(tuple(shape), dtypes[name]))
    return out


def _declared_counts(problem, workload, env: dict[str, Any]) -> tuple[dict[str, float] | None, float | None]:
    hints = getattr(problem.definition, "solkit", None)
    if hints is None:
        return None, None
    from solkit.hardware.specs import UNITS
    from solkit.problems.expr import ExprError, evaluate

    where = problem.definition_path or "definition.json"
    flops: dict[str, float] = {}
    for unit, expr in (hints.flops or {}).items():
        if unit not in UNITS:
            raise SolkitError(f"{where}: solkit.flops: unknown math unit {unit!r}; allowed: {', '.join(UNITS)}")
        try:
            flops[unit] = float(evaluate(expr, env))
        except ExprError as exc:
            raise SolkitError(f"{where}: solkit.flops.{unit} {expr!r}: {exc}") from None
    nbytes = None
    if hints.bytes:
        try:
            nbytes = float(evaluate(hints.bytes, env))
        except ExprError as exc:
            raise SolkitError(f"{where}: solkit.bytes {hints.bytes!r}: {exc}") from None
    return flops or None, nbytes


def _check_outputs(problem, workload, a: Analysis) -> None:
    declared = [
        (tuple(s), dt)
        for s, dt in zip(problem.output_shapes(workload).values(), problem.output_dtypes().values())
        if s is not None
    ]
    traced = [(t.shape, t.dtype) for t in a.outputs]
    if declared != traced:
        a.notes.append(f"the reference returned {_describe(traced)}, the definition declares {_describe(declared)}")


def _describe(items: list[tuple[tuple[int, ...], torch.dtype]]) -> str:
    return ", ".join(f"{str(d).removeprefix('torch.')}{list(s)}" for s, d in items) or "no tensors"


def analyze_workload(
    problem: Any,
    workload: Any,
    arch: str | None = None,
    basis: str = "spec",
    allow_tf32: bool | None = None,
    ceilings: Ceilings | None = None,
    precision: str = "fastest",
    dtype: torch.dtype | None = None,
) -> WorkloadAnalysis:
    """Analyse one workload of a loaded :class:`~solkit.problems.loader.Problem`.

    Declared ``"solkit"`` counts of the definition win over traced ones. T_SOL (``.analysis.sol``)
    is computed on ``ceilings`` if given, else on ``arch``/``basis``; with neither, only the counts.
    ``precision`` is the basis of matrix work; narrowing a computed operand must fit the workload's
    ``max_rtol``. ``dtype`` analyses the floating inputs in that dtype instead of the definition's (as a
    run that casts them executes); counts declared for the definition's dtypes are then not used.
    """
    axes = problem.resolve_axes(workload)
    rtol = workload.tolerance.max_rtol
    ins = workload_inputs(problem, workload)
    recast = dtype is not None and any(
        isinstance(x, ShapeSpec) and x.dtype.is_floating_point and x.dtype != dtype for x in ins
    )
    if recast:
        ins = [ShapeSpec(x.shape, dtype, x.requires_grad) if isinstance(x, ShapeSpec) and x.dtype.is_floating_point
               else x for x in ins]  # fmt: skip
    a = analyze(problem.reference_fn(), *ins, allow_tf32=allow_tf32, precision=precision, rtol=rtol)
    if not recast:
        _check_outputs(problem, workload, a)
        flops, nbytes = _declared_counts(problem, workload, {**axes, **problem.scalar_values(workload)})
        apply_declared(a, flops, nbytes)
    if ceilings is not None:
        a.sol = a.t_sol(ceilings)
    elif arch is not None:
        a.sol = a.sol_for(arch, basis)
    return WorkloadAnalysis(uuid=workload.uuid, axes=axes, analysis=a, problem=problem.name)


def analyze_problem(
    problem: Any,
    arch: str | None = None,
    basis: str = "spec",
    allow_tf32: bool | None = None,
    ceilings: Ceilings | None = None,
    precision: str = "fastest",
) -> list[WorkloadAnalysis]:
    """Analyse every workload of a SOL-ExecBench problem (a directory, a definition.json or a Problem).

    T_SOL is computed on ``ceilings`` if given, else on ``arch``/``basis``; with neither (e.g. on a
    machine without a GPU) only the counts are returned and ``.analysis.sol`` is None.
    """
    from solkit.problems.loader import load_problem

    if isinstance(problem, (str, Path)):
        problem = load_problem(problem)
    if not problem.workloads:
        raise SolkitError(f"{problem.workload_path or problem.root or problem.name}: no workloads to analyse")
    if ceilings is None and arch is not None:
        from solkit.sol.ceilings import get_ceilings

        ceilings = get_ceilings(arch, basis)  # once, not per workload
    return [
        analyze_workload(problem, w, allow_tf32=allow_tf32, ceilings=ceilings, precision=precision)
        for w in problem.workloads
    ]
