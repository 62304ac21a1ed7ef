"""What gets profiled: a problem's reference or a solution, on one workload, with inputs built.

Loading uses :mod:`solkit.problems.loader` (definition, workloads, axes, reference) and
:class:`solkit.harness.inputs.InputFactory` (the harness's inputs, trial 0, seed 200) when they are
importable, and otherwise a minimal reader of the SOL-ExecBench format.

The *model* of the work is what the measured counters are compared with: FLOPs by math unit, fused
bytes (inputs read once, outputs written once) and op-by-op bytes from :mod:`solkit.sol.analysis`
(the same T_SOL as ``solkit analyze``); without it, fused bytes from the definition's shapes and
matmul FLOPs from ``torch.utils.flop_counter``.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.problems.loader import torch_dtype


def _torch_dtype(name: str):
    return torch_dtype(name)  # one table: the problem loader's (SolkitError naming the allowed dtypes)


@dataclass
class ProfileTarget:
    """One runnable thing: ``fn(*args)`` does the work once."""

    label: str
    problem: str
    workload: str
    kind: str  # "reference" or "solution"
    fn: Callable[..., Any]
    args: tuple
    model_bytes: float
    model_flops: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    model_unfused_bytes: float | None = None  # what op-by-op execution moves (solkit.sol.analysis)
    model_source: str = "profile"
    model_precision: str | None = None  # the analysis' precision basis of matrix work (solkit.sol.precision)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise SolkitError(f"{path}: file not found") from exc
    except json.JSONDecodeError as exc:
        raise SolkitError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc


def read_problem(problem_dir: str | Path) -> tuple[dict, list[dict]]:
    """definition.json as a dict and the workload lines as dicts."""
    root = Path(problem_dir)
    if not root.is_dir():
        raise SolkitError(f"{root}: not a problem directory (expected definition.json + workload.jsonl)")
    definition = _read_json(root / "definition.json")
    wl_path = root / "workload.jsonl"
    workloads: list[dict] = []
    if wl_path.exists():
        for n, line in enumerate(wl_path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    workloads.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise SolkitError(f"{wl_path}:{n}: invalid JSON ({exc.msg})") from exc
    for key in ("name", "axes", "inputs", "outputs", "reference"):
        if key not in definition:
            raise SolkitError(f"{root / 'definition.json'}: missing field {key!r}")
    return definition, workloads


def pick_workload(workloads: list[dict], uuid: str | None, where: str) -> dict:
    if not workloads:
        raise SolkitError(f"{where}: workload.jsonl has no workloads")
    if uuid is None:
        return workloads[0]
    for w in workloads:
        if w.get("uuid") == uuid or str(w.get("uuid", "")).startswith(uuid):
            return w
    raise SolkitError(
        f"{where}: no workload with uuid {uuid!r}; have: {', '.join(w.get('uuid', '?') for w in workloads)}"
    )


def resolve_axes(definition: dict, workload: dict) -> dict[str, int]:
    """Every axis value: const, var (from the workload) and expr (safe arithmetic on the others)."""
    try:
        from solkit.problems.expr import evaluate_int as _eval  # the shared safe evaluator
    except ImportError:  # pragma: no cover - older trees
        _eval = None
    axes: dict[str, int] = {}
    pending = []
    for name, spec in definition["axes"].items():
        kind = spec.get("type")
        if kind == "const":
            axes[name] = int(spec["value"])
        elif kind == "var":
            if name not in workload.get("axes", {}):
                raise SolkitError(f"workload {workload.get('uuid')}: var axis {name!r} has no value")
            axes[name] = int(workload["axes"][name])
        elif kind == "expr":
            pending.append((name, spec["expression"]))
        else:
            raise SolkitError(f"axis {name!r}: unknown type {kind!r}; allowed: const, var, expr")
    for name, expression in pending:
        if _eval is not None:
            axes[name] = int(_eval(expression, axes))
        else:
            raise SolkitError(f"axis {name!r}: expression axes need solkit.problems")
    return axes


def _shape(spec: dict, axes: dict[str, int]) -> tuple[int, ...] | None:
    if spec.get("shape") is None:
        return None
    return tuple(int(d) if str(d).isdigit() else axes[d] for d in spec["shape"])


def build_inputs(definition: dict, workload: dict, axes: dict[str, int], device: str, seed: int = 0) -> list[Any]:
    """Random inputs (never zeros) in definition order; scalars from the workload."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    args: list[Any] = []
    custom = None
    specs = workload.get("inputs", {})
    if any(s.get("type") == "custom" for s in specs.values()):
        ep = definition.get("custom_inputs_entrypoint")
        if not ep:
            raise SolkitError("workload uses custom inputs but definition has no custom_inputs_entrypoint")
        module = _exec_source(definition["reference"], f"solkit_ref_{definition['name']}")
        scalars = {k: v.get("value") for k, v in specs.items() if v.get("type") == "scalar"}
        custom = getattr(module, ep)(axes | scalars, torch.device(device))
    for name, tspec in definition["inputs"].items():
        ispec = specs.get(name, {"type": "random"})
        if custom is not None and name in custom:
            args.append(custom[name])
            continue
        shape = _shape(tspec, axes)
        if ispec.get("type") == "scalar" or shape is None:
            args.append(ispec.get("value", 1.0))
            continue
        if ispec.get("type") == "safetensors":
            from safetensors.torch import load_file

            args.append(load_file(ispec["path"])[ispec["tensor_key"]].to(device))
            continue
        dtype = _torch_dtype(tspec["dtype"])
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=gen, dtype=torch.float32)
            if "weight" in name and len(shape) >= 2:
                t = t / math.sqrt(shape[-1])
            if dtype.itemsize == 1:
                t = t.clamp(-2, 2)
            t = t.to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            t = torch.randint(-128 if dtype == torch.int8 else 0, 128, shape, generator=gen).to(dtype)
        args.append(t.to(device))
    return args


def fused_bytes(definition: dict, axes: dict[str, int]) -> float:
    """Bytes of every input tensor read once plus every output written once."""
    total = 0.0
    for group in ("inputs", "outputs"):
        for spec in definition[group].values():
            shape = _shape(spec, axes)
            if shape is None:
                continue
            total += math.prod(shape) * _torch_dtype(spec["dtype"]).itemsize
    return total


def _exec_source(source: str, module_name: str, directory: Path | None = None) -> Any:
    """Import Python source from a real file (so @triton.jit can read it back)."""
    d = directory or Path(tempfile.mkdtemp(prefix="solkit_profile_"))
    path = d / f"{module_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_solution_fn(path: str | Path, n_inputs: int | None = None) -> tuple[Callable[..., Any], bool, str]:
    """(callable, destination_passing_style, name) from a solution.json or a .py with ``run``: as ``solkit eval``
    takes a .py, ``SOLKIT_DESTINATION_PASSING`` decides, else ``run`` taking more than the ``n_inputs`` inputs
    positionally (the outputs after them) is destination-passing."""
    path = Path(path)
    if path.suffix == ".py":
        module = _exec_source(path.read_text(), f"solkit_sol_{path.stem}", Path(tempfile.mkdtemp()))
        if not hasattr(module, "run"):
            raise SolkitError(f"{path}: defines no function 'run'")
        dps = getattr(module, "SOLKIT_DESTINATION_PASSING", None)
        if dps is None and n_inputs is not None:
            kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            dps = sum(p.kind in kinds for p in inspect.signature(module.run).parameters.values()) > n_inputs
        return module.run, bool(dps), path.stem
    sol = _read_json(path)
    try:
        spec = sol["spec"]
        file_name, symbol = spec["entry_point"].split("::")
        languages = spec.get("languages") or [spec.get("language")]
    except (KeyError, ValueError) as exc:
        raise SolkitError(f"{path}: spec.entry_point must be 'file.py::function'") from exc
    if not file_name.endswith(".py"):
        raise SolkitError(f"{path}: only Python solutions can be profiled here (languages {languages})")
    stage = Path(tempfile.mkdtemp(prefix="solkit_sol_"))
    for src in sol.get("sources", []):
        content = src.get("content") or (path.parent / src["path"]).read_text()
        dest = stage / src["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
    sys.path.insert(0, str(stage))
    mod_name = f"solkit_sol_{abs(hash(str(path))) % 10**8}"
    spec_ = importlib.util.spec_from_file_location(mod_name, stage / file_name)
    module = importlib.util.module_from_spec(spec_)
    sys.modules[mod_name] = module
    spec_.loader.exec_module(module)
    if not hasattr(module, symbol):
        raise SolkitError(f"{path}: {file_name} defines no {symbol!r}")
    return getattr(module, symbol), bool(spec.get("destination_passing_style", False)), sol.get("name", path.stem)


#: ``solution="bench:<backend>"`` profiles a ``solkit bench`` backend (eager, compile, vendor, liger,
#: solkit) on the problem: the same callable the bench times, no solution file needed.
BENCH_PREFIX = "bench:"


def bench_backend_fn(solution: str, problem_name: str, reference: Callable[..., Any], device: str):
    """The callable ``solkit bench`` runs for backend ``bench:<name>`` on ``problem_name``."""
    from solkit.backends import BACKENDS

    name = solution[len(BENCH_PREFIX) :]
    backend = BACKENDS.get(name)
    if backend is None:
        raise SolkitError(f"solution {solution!r}: unknown bench backend; allowed: {', '.join(sorted(BACKENDS))}")
    ok, why = backend.available(device)
    if not ok:
        raise SolkitError(f"solution {solution!r}: {why}")
    fn = backend.make(problem_name, reference)
    if fn is None:
        raise SolkitError(f"solution {solution!r}: backend {name} has no implementation of {problem_name}")
    return fn


def count_model_flops(fn: Callable[..., Any], args: tuple) -> dict[str, float]:
    """Matmul-like FLOPs of one call, by math unit (torch's FlopCounterMode; elementwise work is
    not counted: it never sets T_SOL for the memory-bound ops where it occurs)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    total = float(counter.get_total_flops())
    if not total:
        return {}
    dt = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    unit = {
        torch.bfloat16: "bf16_tensor",
        torch.float16: "fp16_tensor",
        torch.float32: "tf32_tensor" if torch.backends.cuda.matmul.allow_tf32 else "fp32_vector",
        torch.float64: "fp64_tensor",
    }.get(dt, "fp8_tensor")
    return {unit: total}


def load_target(
    problem_dir: str | Path,
    workload_uuid: str | None,
    solution: str | Path | None,
    device: str,
    label: str | None = None,
    seed: int = 200,
) -> ProfileTarget:
    """Build a :class:`ProfileTarget` (reference when ``solution`` is None)."""
    definition, workloads = read_problem(problem_dir)
    workload = pick_workload(workloads, workload_uuid, str(problem_dir))
    notes: list[str] = []
    analysis = None
    try:  # the shared loader and input factory, so profiled inputs match the harness's
        from solkit.harness.inputs import InputFactory
        from solkit.problems.loader import load_problem

        problem = load_problem(problem_dir)
        shared_wl = next(w for w in problem.workloads if w.uuid == workload.get("uuid"))
        axes = problem.resolve_axes(shared_wl)
        inputs = list(InputFactory(problem, device, seed=seed).generate(shared_wl, 0).values())
        ref = problem.reference_fn()
        analysis = _shared_analysis(problem, shared_wl, notes)
    except ImportError:  # a tree without solkit.problems / solkit.harness.inputs: the minimal reader
        axes = resolve_axes(definition, workload)
        inputs = build_inputs(definition, workload, axes, device, seed)
        ref = _exec_source(definition["reference"], f"solkit_ref_{abs(hash(str(problem_dir))) % 10**8}").run
        notes.append("loaded with the profiler's minimal SOL-ExecBench reader")
    if solution is None:
        fn, args, kind, name = ref, tuple(inputs), "reference", "reference"
    elif str(solution).startswith(BENCH_PREFIX):
        fn, args, kind = bench_backend_fn(str(solution), definition["name"], ref, device), tuple(inputs), "solution"
        name = str(solution)[len(BENCH_PREFIX) :]
    else:
        sol_fn, dps, name = load_solution_fn(solution, len(definition["inputs"]))
        kind = "solution"
        if dps:
            import torch

            outs = []
            for spec in definition["outputs"].values():
                shape = _shape(spec, axes)
                outs.append(torch.empty(shape, dtype=_torch_dtype(spec["dtype"]), device=device))
            fn, args = sol_fn, tuple(inputs) + tuple(outs)
        else:
            fn, args = sol_fn, tuple(inputs)
    flops: dict[str, float] = {}
    if analysis is not None:
        flops = {u: float(f) for u, f in analysis.flops.items() if f}
    else:
        try:
            flops = count_model_flops(ref, tuple(inputs))
        except Exception as exc:  # the counter is a model aid, never a reason to fail the profile
            notes.append(f"FLOP count unavailable: {type(exc).__name__}: {exc}")
    return ProfileTarget(
        label=label or f"{definition['name']}.{name}",
        problem=definition["name"],
        workload=workload.get("uuid", "?"),
        kind=kind,
        fn=fn,
        args=args,
        model_bytes=float(analysis.fused_bytes) if analysis is not None else fused_bytes(definition, axes),
        model_flops=flops,
        notes=notes,
        model_unfused_bytes=float(analysis.unfused_bytes) if analysis is not None else None,
        model_source="solkit.sol.analysis" if analysis is not None else "profile (definition shapes, FlopCounterMode)",
        model_precision=analysis.precision if analysis is not None else None,
    )


def _shared_analysis(problem: Any, workload: Any, notes: list[str]) -> Any | None:
    """solkit's SOL analysis of the reference (FLOPs by unit, fused and op-by-op bytes; declared
    counts win), so the profile's T_SOL is the one ``solkit analyze`` and ``solkit bench`` use."""
    try:
        from solkit.sol.analysis import analyze_workload

        analysis = analyze_workload(problem, workload).analysis
    except Exception as exc:  # ImportError in older trees, or a reference the tracer cannot follow
        notes.append(f"solkit.sol.analysis unavailable ({type(exc).__name__}: {exc}); counted here instead")
        return None
    if analysis.uncounted:
        notes.append(f"FLOPs of {', '.join(analysis.uncounted)} not counted by the analysis")
    return analysis
