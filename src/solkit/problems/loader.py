"""Load SOL-ExecBench problem directories.

A problem directory holds ``definition.json`` and ``workload.jsonl`` (optionally ``solution*.json``
and ``config.json``). Stable API (used by the harness and by SOL analysis):

* ``load_problem(path) -> Problem`` — ``path`` is a problem directory or a ``definition.json``
  (the workloads then come from ``workload.jsonl`` beside it, if any);
* ``Problem.definition`` (:class:`~solkit.problems.schema.Definition`), ``Problem.workloads``
  (list of :class:`~solkit.problems.schema.Workload`), ``Problem.root`` (directory or None);
* ``Problem.resolve_axes(workload) -> dict[str, int]`` — every axis (const, var, expr) for a workload,
  with the definition's ``constraints`` checked;
* ``Problem.input_shapes(workload)`` / ``Problem.output_shapes(workload)`` ->
  ``{name: tuple[int, ...] | None}`` (None = Python scalar); ``Problem.shapes_for(workload)`` both;
* ``Problem.input_dtypes()`` / ``Problem.output_dtypes()`` -> ``{name: torch.dtype}``;
* ``Problem.scalar_values(workload) -> {name: value}`` for ``scalar`` inputs;
* ``Problem.reference_fn()`` -> the reference ``run`` (imported from a real file so ``@triton.jit``
  and ``inspect`` work); ``load_reference(problem)`` is the same as a function;
* ``load_solution(path) -> Solution`` (sources with empty content read from beside the JSON);
  ``solution_from_python(path, definition)`` for a ``.py`` with ``run``;
* ``load_workloads(path)`` and ``load_definition(path)`` for single files.

Every malformed input raises :class:`solkit.errors.SolkitError` with one line naming the file and
the field (invalid JSON, no ``run``, a shape naming an unknown axis, a missing var axis, ...).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from solkit.errors import SolkitError
from solkit.problems.expr import ExprError, evaluate, evaluate_int, names_in
from solkit.problems.schema import MAX_AXIS, Definition, ScalarInput, Solution, Workload

DEFINITION_FILE = "definition.json"
WORKLOAD_FILE = "workload.jsonl"

_TORCH_DTYPES = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float4_e2m1": "float4_e2m1fn_x2",
    "float4_e2m1fn_x2": "float4_e2m1fn_x2",
    "int64": "int64",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "bool": "bool",
}


def torch_dtype(name: str):
    """The torch dtype for a SOL-ExecBench dtype string (SolkitError if this torch lacks it)."""
    import torch

    attr = _TORCH_DTYPES.get(str(getattr(name, "value", name)))
    dt = getattr(torch, attr, None) if attr else None
    if dt is None:
        raise SolkitError(f"dtype {name!r} is not available in torch {torch.__version__}; allowed: "
                          f"{', '.join(sorted(_TORCH_DTYPES))}")  # fmt: skip
    return dt


def _validation_message(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if not str(p).startswith("function-after"))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc + ': ' if loc else ''}{msg}{more}"


def _parse_model(model: type[BaseModel], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SolkitError(f"{where}: {_validation_message(exc)}") from None


def _read_text(path: Path) -> str:
    """A problem file's text; unreadable or non-UTF-8 files are one SolkitError line naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SolkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SolkitError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _read_json(path: Path) -> Any:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SolkitError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def load_definition(path: str | Path) -> Definition:
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict):
        raise SolkitError(f"{path}: expected a JSON object")
    if not data.get("reference") and (path.parent / "reference.py").is_file():
        data["reference"] = _read_text(path.parent / "reference.py")
    return _parse_model(Definition, data, str(path))


def load_workloads(path: str | Path) -> list[Workload]:
    path = Path(path)
    lines = _read_text(path).splitlines()
    out: list[Workload] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SolkitError(f"{path}:{i}: invalid JSON at column {exc.colno}: {exc.msg}") from None
        # FlashInfer-Bench stores workload-only traces ({"definition", "workload": {...}}).
        if isinstance(data, dict) and isinstance(data.get("workload"), dict) and "uuid" not in data:
            data = data["workload"]
        out.append(_parse_model(Workload, data, f"{path}:{i}"))
    return out


def load_solution(path: str | Path) -> Solution:
    """Read a ``solution.json``; sources with an empty ``content`` are read from beside the file."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict):
        raise SolkitError(f"{path}: expected a JSON object")
    for i, src in enumerate(data.get("sources") or []):
        if isinstance(src, dict) and not src.get("content") and isinstance(src.get("path"), str):
            beside = path.parent / src["path"]
            if not beside.is_file():
                raise SolkitError(f"{path}: sources[{i}].content is empty and {beside} does not exist")
            src["content"] = _read_text(beside)
    return _parse_model(Solution, data, str(path))


def solution_from_python(path: str | Path, definition: Definition) -> Solution:
    """A ``.py`` file as a solution of ``definition`` (what ``profile`` and ``tune`` take): entry ``run``;
    language ``triton`` when it imports Triton, else ``pytorch``; destination-passing style when ``run`` takes
    the inputs and then the outputs, return style when it takes the inputs only (a module-level
    ``SOLKIT_DESTINATION_PASSING = True/False`` decides otherwise). Local modules it imports by name from its
    own directory travel with it."""
    import ast

    path = Path(path)
    try:
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
    except OSError as exc:
        raise SolkitError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except SyntaxError as exc:
        raise SolkitError(f"{path}:{exc.lineno}: not valid Python ({exc.msg})") from None
    run = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "run"),
               None)  # fmt: skip
    if run is None:
        raise SolkitError(f"{path}: defines no top-level function 'run'")
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    n_in, n_out = len(definition.inputs), len(definition.outputs)
    n_params = len(run.args.posonlyargs) + len(run.args.args)
    dps = {n_in: False, n_in + n_out: True}.get(n_params)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SOLKIT_DESTINATION_PASSING"
                                                for t in node.targets):  # fmt: skip
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool)):
                raise SolkitError(f"{path}: SOLKIT_DESTINATION_PASSING must be True or False")
            dps = node.value.value
    if dps is None:
        raise SolkitError(f"{path}: run takes {n_params} parameters; {definition.name!r} has {n_in} inputs and "
                          f"{n_out} outputs (give {n_in}, returning the outputs, or {n_in + n_out})")  # fmt: skip
    sources = [{"path": path.name, "content": source}]
    for mod in sorted(imported):
        beside = path.parent / f"{mod}.py"
        if beside.is_file() and beside.resolve() != path.resolve():
            sources.append({"path": beside.name, "content": beside.read_text()})
    data = {
        "name": path.stem,
        "definition": definition.name,
        "author": "",
        "spec": {"languages": ["triton" if "triton" in imported else "pytorch"],
                 "entry_point": f"{path.name}::run", "destination_passing_style": dps},
        "sources": sources,
    }  # fmt: skip
    return _parse_model(Solution, data, str(path))


@dataclass
class Problem:
    """A definition with its workloads. See the module docstring for the stable API."""

    definition: Definition
    workloads: list[Workload]
    root: Path | None = None
    definition_path: Path | None = None
    workload_path: Path | None = None
    _reference: Callable[..., Any] | None = field(default=None, repr=False)
    _module: Any = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.definition.name

    def _where(self, workload: Workload) -> str:
        return f"{self.workload_path or 'workload'} (uuid {workload.uuid})"

    def scalar_values(self, workload: Workload) -> dict[str, bool | int | float]:
        return {n: s.value for n, s in workload.inputs.items() if isinstance(s, ScalarInput)}

    def resolve_axes(self, workload: Workload) -> dict[str, int]:
        """All axis sizes for ``workload``: consts, the workload's vars, then expressions; constraints checked."""
        d = self.definition
        where = self._where(workload)
        unknown = set(workload.axes) - set(d.axes)
        if unknown:
            raise SolkitError(f"{where}: axes {sorted(unknown)} are not defined; axes are {sorted(d.axes)}")
        axes = dict(d.const_axes)
        for name, value in workload.axes.items():
            if name in axes and axes[name] != value:
                raise SolkitError(f"{where}: axes.{name}={value} contradicts the const value {axes[name]}")
            axes[name] = int(value)
        missing = [n for n in d.var_axes if n not in axes]
        if missing:
            raise SolkitError(f"{where}: axes: missing values for var axes {missing}")
        pending = {n: e for n, e in d.expr_axes.items() if n not in axes}
        while pending:  # expressions may refer to other expressions: resolve in dependency order
            progressed = False
            for name, expr in list(pending.items()):
                try:
                    axes[name] = evaluate_int(expr, axes)
                except ExprError as exc:
                    if "unknown name" in str(exc) and any(n in str(exc) for n in pending):
                        continue
                    raise SolkitError(f"{self.definition_path}: axes.{name}.expression: {exc}") from None
                if not 0 <= axes[name] <= MAX_AXIS:
                    raise SolkitError(f"{where}: axis {name} = {expr} evaluates to {axes[name]}, outside 0..2**40")
                del pending[name]
                progressed = True
            if not progressed:
                raise SolkitError(f"{self.definition_path}: axes: circular expressions {sorted(pending)}")
        env = {**axes, **self.scalar_values(workload)}
        for i, text in enumerate(d.constraints):
            if names_in(text) - set(env):  # names a tensor or a random scalar: see check_input_constraints
                continue
            try:
                ok = evaluate(text, env)
            except ExprError as exc:
                raise SolkitError(f"{self.definition_path}: constraints[{i}] {text!r}: {exc}") from None
            if not ok:
                raise SolkitError(f"{where}: violates constraints[{i}] {text!r} with axes {axes}")
        return axes

    def check_input_constraints(self, workload: Workload, values: dict[str, Any]) -> None:
        """Check the constraints that name inputs (``num_kv_indices == kv_indptr[-1].item()``) on generated
        ``values``; SolkitError naming the constraint when one fails."""
        env = {**self.resolve_axes(workload), **values}
        given = set(self.definition.axes) | set(self.scalar_values(workload))
        for i, text in enumerate(self.definition.constraints):
            if not names_in(text) - given:
                continue  # checked by resolve_axes already
            try:
                ok = evaluate(text, env)
            except ExprError as exc:
                raise SolkitError(f"{self.definition_path}: constraints[{i}] {text!r}: {exc}") from None
            if not ok:
                raise SolkitError(f"{self._where(workload)}: the inputs violate constraints[{i}] {text!r}")

    def _shapes(self, specs, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        axes = self.resolve_axes(workload)
        return {
            name: None if s.shape is None else tuple(int(d) if d.isdigit() else axes[d] for d in s.shape)
            for name, s in specs.items()
        }

    def input_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        return self._shapes(self.definition.inputs, workload)

    def output_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        return self._shapes(self.definition.outputs, workload)

    def shapes_for(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        return {**self.input_shapes(workload), **self.output_shapes(workload)}

    def input_dtypes(self) -> dict[str, Any]:
        return {n: torch_dtype(s.dtype) for n, s in self.definition.inputs.items()}

    def output_dtypes(self) -> dict[str, Any]:
        return {n: torch_dtype(s.dtype) for n, s in self.definition.outputs.items()}

    def validate_workload(self, workload: Workload) -> None:
        """Check a workload against the definition (axes, input names, custom entry point)."""
        where = self._where(workload)
        unknown = set(workload.inputs) - set(self.definition.inputs)
        if unknown:
            raise SolkitError(f"{where}: inputs {sorted(unknown)} are not inputs of the definition")
        if workload.is_custom and not self.definition.custom_inputs_entrypoint:
            raise SolkitError(f"{where}: custom inputs need custom_inputs_entrypoint in the definition")
        for name, spec in self.definition.inputs.items():
            src = workload.inputs.get(name)
            if isinstance(src, ScalarInput) and spec.shape is not None:
                raise SolkitError(f"{where}: inputs.{name} is a tensor of shape {spec.shape}, not a scalar")
        self.resolve_axes(workload)

    def module(self) -> Any:
        """The reference source imported as a module (cached)."""
        if self._module is None:
            self._module = import_source(self.definition.reference, f"solkit_ref_{_slug(self.definition.name)}")
        return self._module

    def reference_fn(self) -> Callable[..., Any]:
        """The reference ``run`` callable."""
        if self._reference is None:
            self._reference = self.module().run
        return self._reference

    def custom_inputs_fn(self) -> Callable[..., Any] | None:
        ep = self.definition.custom_inputs_entrypoint
        return getattr(self.module(), ep) if ep else None


def _slug(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:12]


def import_source(source: str, module_name: str, directory: str | Path | None = None) -> Any:
    """Import Python source from a real file (Triton's ``@jit`` and ``inspect`` need one)."""
    if directory is None:
        # A path fixed by the content, not a fresh temp dir per import: processes that import the same
        # reference (the bench's compile warm-up workers, the harness's workers) share one file, and
        # a long run does not leave a temp dir behind per import.
        digest = hashlib.sha1(f"{module_name}\n{source}".encode()).hexdigest()[:16]
        directory = Path(tempfile.gettempdir()) / "solkit_src" / digest
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{module_name}.py"
    if not (path.exists() and path.read_text() == source):
        tmp = directory / f".{module_name}.{os.getpid()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)  # atomic: a concurrent importer never reads a half-written file
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_reference(problem: Problem) -> Callable[..., Any]:
    """The reference ``run`` of a problem (same as ``problem.reference_fn()``)."""
    return problem.reference_fn()


def load_problem(path: str | Path, workload_path: str | Path | None = None) -> Problem:
    """Load a problem directory (or a definition.json with workload.jsonl beside it, or ``workload_path``)."""
    path = Path(path)
    if path.is_dir():
        def_path = path / DEFINITION_FILE
        if not def_path.is_file():
            raise SolkitError(f"{path}: no {DEFINITION_FILE} in this directory")
    elif path.is_file():
        def_path = path
    else:
        raise SolkitError(f"{path}: no such problem directory or definition file")
    definition = load_definition(def_path)
    wl_path = Path(workload_path) if workload_path is not None else def_path.parent / WORKLOAD_FILE
    if workload_path is not None and not wl_path.is_file():
        raise SolkitError(f"--workload {wl_path}: no such file")
    workloads = load_workloads(wl_path) if wl_path.is_file() else []
    problem = Problem(definition, workloads, def_path.parent, def_path, wl_path if wl_path.is_file() else None)
    seen: set[str] = set()
    for w in workloads:
        if w.uuid in seen:
            raise SolkitError(f"{wl_path}: duplicate workload uuid {w.uuid!r}")
        seen.add(w.uuid)
        problem.validate_workload(w)
    return problem
