"""Pydantic v2 models of SOL-ExecBench's problem, solution and trace files.

The four documents (see docs/format.md):

* :class:`Definition` — ``definition.json``: axes, input/output tensor specs, reference source;
* :class:`Workload` — one line of ``workload.jsonl``: var-axis values, input sources, tolerance;
* :class:`Solution` — ``solution.json``: languages, entry point ``"file.py::fn"``, sources;
* :class:`Trace` — one line of a traces JSONL file: the result of one solution on one workload.

Compatibility rules: every field SOL-ExecBench defines keeps its name, type and default; unknown
keys in input files are kept (``extra="allow"``) so a file read and written again is unchanged;
solkit's additions (SOL numbers, timing details, telemetry) are *extra* keys inside objects whose
SOL-ExecBench model ignores unknown keys (``Performance``, ``Environment``, ``Evaluation``), so
SOL-ExecBench's reader still parses solkit traces.

Validation that needs only the document itself happens here (reference parses and defines ``run``
with parameters equal to the inputs in order; shapes name defined axes; names don't collide;
custom inputs not mixed with others). Validation that needs a workload (var axes bound, expression
axes, constraints) happens in :mod:`solkit.problems.loader`.
"""

from __future__ import annotations

import ast
from enum import Enum
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from solkit.problems.expr import ExprError, names_in

NonEmpty = Annotated[str, Field(min_length=1)]


class _FileModel(BaseModel):
    """Models of user files: unknown keys are kept and written back unchanged."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _TraceModel(BaseModel):
    """Trace parts: unknown keys are ignored on read, as SOL-ExecBench does."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


# --------------------------------------------------------------------------------------------
# Definition
# --------------------------------------------------------------------------------------------


class DType(str, Enum):
    """The 13 dtype strings of SOL-ExecBench (``float4_e2m1`` and ``float4_e2m1fn_x2`` are one torch dtype)."""

    float64 = "float64"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e5m2 = "float8_e5m2"
    float4_e2m1 = "float4_e2m1"
    float4_e2m1fn_x2 = "float4_e2m1fn_x2"
    int64 = "int64"
    int32 = "int32"
    int16 = "int16"
    int8 = "int8"
    bool = "bool"


#: The largest axis size accepted (2**40, about 1.1e12 elements along one axis): beyond it a size is a typo or an
#: attack (10**30, 2**128), and torch's int64 shapes would overflow once two such axes multiply.
MAX_AXIS = 2**40


class AxisConst(_FileModel):
    """An axis with a fixed size."""

    type: Literal["const"] = "const"
    value: int = Field(ge=0, le=MAX_AXIS)
    description: str | None = None


class AxisVar(_FileModel):
    """An axis whose size each workload gives in its ``axes``."""

    type: Literal["var"] = "var"
    description: str | None = None


class AxisExpr(_FileModel):
    """An axis computed from other axes, e.g. ``"num_heads * head_dim"`` (safe evaluator, integers only)."""

    type: Literal["expr"] = "expr"
    expression: NonEmpty
    description: str | None = None

    @field_validator("expression")
    @classmethod
    def _parses(cls, v: str) -> str:
        try:
            names_in(v)
        except ExprError as exc:
            raise ValueError(str(exc)) from None
        return v


Axis = Annotated[AxisConst | AxisVar | AxisExpr, Field(discriminator="type")]


class TensorSpec(_FileModel):
    """Shape (axis names or digit literals; ``null`` = a Python scalar, ``[]`` = a 0-d tensor) and dtype."""

    shape: list[NonEmpty] | None
    dtype: DType
    description: str | None = None


class SolHints(_FileModel):
    """solkit extension (key ``"solkit"`` in a definition): analytic work for T_SOL, mutable inputs.

    ``flops`` maps a math-unit name (``bf16_tensor``, ``fp32_vector``, ...) to an expression over the
    axes; ``bytes`` is the fused byte count expression. SOL-ExecBench ignores this key.
    """

    flops: dict[str, str] = Field(default_factory=dict)
    bytes: str | None = None
    mutated_inputs: list[str] = Field(default_factory=list)
    """Inputs the kernel may modify in place (all others must come back unchanged)."""


def _run_params(tree: ast.Module, fn_name: str) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn_name:
            return [a.arg for a in node.args.posonlyargs] + [a.arg for a in node.args.args]
    return None


class Definition(_FileModel):
    """``definition.json``: a kernel's interface and its reference implementation."""

    name: NonEmpty
    op_type: str | None = None
    description: str | None = None
    hf_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    axes: dict[NonEmpty, Axis]
    constraints: list[str] = Field(default_factory=list)
    """Boolean expressions over axes and inputs, checked for every workload (FlashInfer-Bench style); those naming
    a tensor input (``kv_indptr[-1].item()``) are checked on the generated inputs."""
    inputs: dict[NonEmpty, TensorSpec]
    outputs: dict[NonEmpty, TensorSpec]
    reference: NonEmpty
    custom_inputs_entrypoint: str | None = None
    solkit: SolHints | None = None

    @model_validator(mode="after")
    def _check(self) -> Definition:
        try:
            tree = ast.parse(self.reference, mode="exec")
        except SyntaxError as exc:
            raise ValueError(f"reference: not valid Python (line {exc.lineno}: {exc.msg})") from None
        params = _run_params(tree, "run")
        if params is None:
            raise ValueError("reference: must define a top-level function `run`")
        if params != list(self.inputs):
            raise ValueError(f"reference: run{tuple(params)} must take exactly the inputs in order {list(self.inputs)}")
        if self.custom_inputs_entrypoint is not None:
            ep = self.custom_inputs_entrypoint
            if not ep.isidentifier() or _run_params(tree, ep) is None:
                raise ValueError(f"custom_inputs_entrypoint: {ep!r} is not a top-level function of the reference")
        if clash := set(self.inputs) & set(self.axes):
            raise ValueError(f"inputs: names {sorted(clash)} are also axis names")
        if clash := set(self.inputs) & set(self.outputs):
            raise ValueError(f"outputs: names {sorted(clash)} are also input names")
        for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            for tname, spec in specs.items():
                for dim in spec.shape or ():
                    if not dim.isdigit() and dim not in self.axes:
                        raise ValueError(f"{kind}.{tname}.shape: unknown axis {dim!r}; axes are {sorted(self.axes)}")
        for name, axis in self.axes.items():
            if isinstance(axis, AxisExpr) and (unknown := names_in(axis.expression) - set(self.axes)):
                raise ValueError(f"axes.{name}.expression: unknown names {sorted(unknown)}")
        for i, text in enumerate(self.constraints):
            try:
                unknown = names_in(text) - set(self.axes) - set(self.inputs)  # tensors: checked on real inputs
            except ExprError as exc:
                raise ValueError(f"constraints[{i}]: {exc}") from None
            if unknown:
                raise ValueError(f"constraints[{i}]: unknown names {sorted(unknown)}")
        return self

    @property
    def const_axes(self) -> dict[str, int]:
        return {n: a.value for n, a in self.axes.items() if isinstance(a, AxisConst)}

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if isinstance(a, AxisVar)]

    @property
    def expr_axes(self) -> dict[str, str]:
        return {n: a.expression for n, a in self.axes.items() if isinstance(a, AxisExpr)}


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------


class RandomInput(_FileModel):
    type: Literal["random"] = "random"


class ScalarInput(_FileModel):
    type: Literal["scalar"] = "scalar"
    value: bool | int | float


class SafetensorsInput(_FileModel):
    type: Literal["safetensors"] = "safetensors"
    path: NonEmpty
    tensor_key: NonEmpty


class CustomInput(_FileModel):
    """Generated by the definition's ``custom_inputs_entrypoint``; all inputs of a workload or none."""

    type: Literal["custom"] = "custom"


InputSpec = Annotated[RandomInput | ScalarInput | SafetensorsInput | CustomInput, Field(discriminator="type")]


class ToleranceSpec(_FileModel):
    """Per-workload tolerance, SOL-ExecBench defaults.

    An element matches when ``|out - ref| <= max_atol + max_rtol * |ref|``. solkit's harness requires
    *every* element to match unless the workload sets ``required_matched_ratio`` explicitly (or the
    CLI's ``--matched-ratio`` says otherwise); the 0.99 default is kept here only so that files and
    traces round-trip unchanged.
    """

    max_atol: float = Field(default=1e-2, ge=0)
    max_rtol: float = Field(default=1e-2, ge=0)
    required_matched_ratio: float = Field(default=0.99, ge=0, le=1)
    max_error_cap: float | None = None
    allow_negative_inf: bool = False

    @property
    def explicit_matched_ratio(self) -> bool:
        return "required_matched_ratio" in self.model_fields_set


class Workload(_FileModel):
    """One line of ``workload.jsonl``."""

    uuid: NonEmpty
    axes: dict[str, Annotated[int, Field(ge=0, le=MAX_AXIS)]] = Field(default_factory=dict)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    tolerance: ToleranceSpec = Field(default_factory=ToleranceSpec)

    @model_validator(mode="after")
    def _custom_not_mixed(self) -> Workload:
        kinds = {isinstance(v, CustomInput) for v in self.inputs.values()}
        if len(kinds) > 1:
            raise ValueError("inputs: `custom` inputs cannot be mixed with other input types in one workload")
        return self

    @property
    def is_custom(self) -> bool:
        return any(isinstance(v, CustomInput) for v in self.inputs.values())


# --------------------------------------------------------------------------------------------
# Solution
# --------------------------------------------------------------------------------------------

PYTHON_LANGUAGES = {"pytorch", "triton", "cute_dsl", "cutile", "cudnn_frontend", "python", "tilelang"}
CPP_LANGUAGES = {"cutlass", "cudnn", "cublas", "cuda_cpp", "cuda", "cpp"}
PYTHON_SUFFIXES = {".py"}
CPP_SUFFIXES = {".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cuh"}


class Language(str, Enum):
    """SOL-ExecBench's languages, plus FlashInfer-Bench's names (python, cuda, cpp, tilelang)."""

    pytorch = "pytorch"
    triton = "triton"
    cute_dsl = "cute_dsl"
    cutile = "cutile"
    cudnn_frontend = "cudnn_frontend"
    cutlass = "cutlass"
    cudnn = "cudnn"
    cublas = "cublas"
    cuda_cpp = "cuda_cpp"
    python = "python"
    cuda = "cuda"
    cpp = "cpp"
    tilelang = "tilelang"


class CompileOptions(_FileModel):
    """C++/CUDA build flags; as in SOL-ExecBench, these defaults apply only when the object is present."""

    cflags: list[str] = Field(default_factory=list)
    cuda_cflags: list[str] = Field(default_factory=lambda: ["-O3", "--use_fast_math"])
    ld_flags: list[str] = Field(default_factory=lambda: ["-lcuda"])


class BuildSpec(_FileModel):
    languages: list[Language] = Field(min_length=1)
    target_hardware: list[NonEmpty] = Field(default_factory=lambda: ["LOCAL"], min_length=1)
    """SOL-ExecBench allows ``B200`` and ``LOCAL``; solkit accepts any name and runs on the local device."""
    entry_point: NonEmpty
    dependencies: list[str] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: Literal["torch", "tvm-ffi"] | None = None
    compile_options: CompileOptions | None = None

    @model_validator(mode="before")
    @classmethod
    def _language_alias(cls, data: Any) -> Any:
        # FlashInfer-Bench writes a single "language".
        if isinstance(data, dict) and "languages" not in data and "language" in data:
            data = {**data, "languages": [data["language"]]}
        return data

    @model_validator(mode="after")
    def _check(self) -> BuildSpec:
        if self.entry_point.count("::") != 1 or not all(self.entry_point.split("::")):
            raise ValueError(f"entry_point: {self.entry_point!r} must look like 'file.py::function'")
        names = {lang.value for lang in self.languages}
        if names & PYTHON_LANGUAGES and names & CPP_LANGUAGES:
            raise ValueError(f"languages: cannot mix Python and C++ families ({sorted(names)})")
        return self

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.entry_point.split("::")[1]

    @property
    def is_cpp(self) -> bool:
        return any(lang.value in CPP_LANGUAGES for lang in self.languages)


class SourceFile(_FileModel):
    """A source file; an empty ``content`` is filled from the file of that path beside ``solution.json``."""

    path: NonEmpty
    content: str = ""

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"path {v!r} must be relative, without '..'")
        return v


class Solution(_FileModel):
    """``solution.json``: a candidate implementation of a definition."""

    name: NonEmpty
    definition: NonEmpty
    author: str = ""
    description: str | None = None
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> Solution:
        paths = [s.path for s in self.sources]
        if len(paths) != len(set(paths)):
            raise ValueError("sources: duplicate paths")
        if self.spec.entry_file not in paths:
            raise ValueError(f"spec.entry_point: file {self.spec.entry_file!r} is not among sources {paths}")
        suffix = PurePosixPath(self.spec.entry_file).suffix
        allowed = CPP_SUFFIXES if self.spec.is_cpp else PYTHON_SUFFIXES
        if suffix not in allowed:
            raise ValueError(f"spec.entry_point: suffix {suffix!r} does not fit languages; allowed {sorted(allowed)}")
        return self


# --------------------------------------------------------------------------------------------
# Trace
# --------------------------------------------------------------------------------------------


class EvaluationStatus(str, Enum):
    PASSED = "PASSED"
    INVALID_REFERENCE = "INVALID_REFERENCE"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    REWARD_HACK = "REWARD_HACK"


class Correctness(_TraceModel):
    """Errors over all correctness trials (the worst trial). Non-finite errors are stored as 0 with a flag."""

    max_relative_error: float = Field(default=0.0, ge=0)
    max_absolute_error: float = Field(default=0.0, ge=0)
    has_nan: bool = False
    has_inf: bool = False
    extra: dict[str, Any] | None = None


class Performance(_TraceModel):
    """SOL-ExecBench's three fields, then solkit's (ignored by SOL-ExecBench's reader)."""

    latency_ms: float = Field(default=0.0, ge=0)
    reference_latency_ms: float = Field(default=0.0, ge=0)
    speedup_factor: float = Field(default=0.0, ge=0)
    # solkit additions
    t_sol_ms: float | None = None
    sol_fraction: float | None = None
    anchored_score: float | None = None
    sol_violation: bool | None = None
    sol: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    reference_timing: dict[str, Any] | None = None


class Environment(_TraceModel):
    hardware: NonEmpty
    libs: dict[str, str] = Field(default_factory=dict)
    # solkit additions
    device: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    seed: int | None = None
    timing_method: str | None = None


class Evaluation(_TraceModel):
    """Outcome on one workload. As in SOL-ExecBench: PASSED needs correctness and performance,
    INCORRECT_NUMERICAL needs correctness only, every other status has neither."""

    status: EvaluationStatus
    environment: Environment
    timestamp: NonEmpty
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None
    # solkit addition: why a check failed, notes (e.g. SOL skipped), trial counts
    solkit: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _status_fields(self) -> Evaluation:
        s = self.status
        need_c = s in (EvaluationStatus.PASSED, EvaluationStatus.INCORRECT_NUMERICAL)
        need_p = s == EvaluationStatus.PASSED
        if need_c != (self.correctness is not None):
            raise ValueError(f"correctness must be {'present' if need_c else 'absent'} when status is {s.value}")
        if need_p != (self.performance is not None):
            raise ValueError(f"performance must be {'present' if need_p else 'absent'} when status is {s.value}")
        return self


class Trace(_TraceModel):
    """One line of a traces file; ``solution`` and ``evaluation`` are null in a workload-only trace."""

    definition: NonEmpty
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None

    @property
    def passed(self) -> bool:
        return self.evaluation is not None and self.evaluation.status == EvaluationStatus.PASSED
