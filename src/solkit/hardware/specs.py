"""The hardware database: dense peak throughput, bandwidth and sizes per product, each value sourced.

The data lives in ``data/hardware.yaml``; this module validates it (pydantic) and gives typed access.
Peaks are stored in TFLOP/s and GB/s in the file and exposed in FLOP/s and bytes/s here.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solkit.errors import SolkitError, choices_hint

#: Math units a FLOP can be charged to: ``<dtype>_<vector|tensor>``.
UNITS = (
    "fp64_vector",
    "fp64_tensor",
    "fp32_vector",
    "tf32_tensor",
    "bf16_tensor",
    "fp16_tensor",
    "fp8_tensor",
    "int8_tensor",
    "fp4_tensor",
)
#: dtype names accepted on the command line, mapped to the unit a GEMM in that dtype uses.
DTYPE_TO_TENSOR_UNIT = {
    "fp64": "fp64_tensor",
    "fp32": "fp32_vector",  # SIMT fp32; TF32 only when explicitly allowed
    "tf32": "tf32_tensor",
    "bf16": "bf16_tensor",
    "fp16": "fp16_tensor",
    "fp8": "fp8_tensor",
    "int8": "int8_tensor",
    "fp4": "fp4_tensor",
}
DTYPE_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float4_e2m1": "fp4",
    "float4_e2m1fn_x2": "fp4",
}
ValueKind = Literal["datasheet", "whitepaper", "derived", "low-confidence", "measured"]


class Sourced(BaseModel):
    """One number with its provenance."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    source: str
    kind: ValueKind
    note: str | None = None


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str
    title: str


class Match(BaseModel):
    """How a live device is recognised (by properties first; the name is a hint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name_regex: str | None = None
    sm_count: int | None = None
    memory_gb_range: tuple[float, float] | None = None


class ArchSpec(BaseModel):
    """One product record of the hardware database."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    vendor: str
    name: str
    family: str
    compute_capability: str
    match: Match = Field(default_factory=Match)
    sm_count: Sourced
    boost_clock_mhz: Sourced
    memory_bytes: Sourced
    memory_bandwidth_gbs: Sourced
    l2_bytes: Sourced
    peaks_tflops: dict[str, Sourced]
    derived_from_device: bool = False  # True for records built at run time (unknown GPU, CPU)

    @field_validator("peaks_tflops")
    @classmethod
    def _known_units(cls, v: dict[str, Sourced]) -> dict[str, Sourced]:
        for unit in v:
            if unit not in UNITS:
                raise ValueError(choices_hint(unit, list(UNITS), "math unit"))
        return v

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s."""
        return self.memory_bandwidth_gbs.value * 1e9

    def peak_flops(self, unit: str) -> float:
        """Dense peak of ``unit`` in FLOP/s; raises SolkitError naming the units this arch has."""
        if unit not in self.peaks_tflops:
            raise SolkitError(choices_hint(unit, list(self.peaks_tflops), f"math unit for {self.id}"))
        return self.peaks_tflops[unit].value * 1e12

    def flops_by_unit(self) -> dict[str, float]:
        return {u: s.value * 1e12 for u, s in self.peaks_tflops.items()}


class SourcedFlag(BaseModel):
    """One yes/no architecture feature with its provenance."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: bool
    source: str
    kind: ValueKind
    note: str | None = None


class CCLimits(BaseModel):
    """Per-SM limits and features that follow from an NVIDIA compute capability (the same on every product)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    smem_per_sm_bytes: Sourced
    smem_per_block_bytes: Sourced  # opt-in maximum of one thread block
    regs_per_sm: Sourced  # 32-bit registers
    max_regs_per_thread: Sourced
    tma: SourcedFlag
    wgmma: SourcedFlag
    gluon_hopper: SourcedFlag

    def sourced(self) -> list[Sourced | SourcedFlag]:
        return [getattr(self, name) for name in type(self).model_fields]


class HardwareDB(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int
    units: list[str]
    sources: dict[str, Source]
    compute_capabilities: dict[str, CCLimits] = Field(default_factory=dict)
    records: list[ArchSpec]

    @model_validator(mode="after")
    def _check(self) -> HardwareDB:
        ids = [r.id for r in self.records]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate arch ids: {sorted(dupes)}")
        for r in self.records:
            fields = [r.sm_count, r.boost_clock_mhz, r.memory_bytes, r.memory_bandwidth_gbs, r.l2_bytes]
            for s in fields + list(r.peaks_tflops.values()):
                if s.source not in self.sources:
                    raise ValueError(f"{r.id}: unknown source key {s.source!r}")
            if r.vendor == "nvidia" and r.compute_capability not in self.compute_capabilities:
                raise ValueError(f"{r.id}: compute capability {r.compute_capability} has no compute_capabilities entry")
        for cc, lim in self.compute_capabilities.items():
            for s in lim.sourced():
                if s.source not in self.sources:
                    raise ValueError(f"compute capability {cc}: unknown source key {s.source!r}")
            if lim.smem_per_block_bytes.value > lim.smem_per_sm_bytes.value:
                raise ValueError(f"compute capability {cc}: shared memory per block exceeds shared memory per SM")
        return self


def resolve_dtype(name: str) -> str:
    """Normalise a dtype name (``bfloat16``, ``bf16``, ...) to solkit's short form."""
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_TO_TENSOR_UNIT:
        raise SolkitError(choices_hint(name, list(DTYPE_TO_TENSOR_UNIT), "dtype"))
    return key


@functools.lru_cache(maxsize=1)
def load_db() -> HardwareDB:
    text = resources.files("solkit.hardware").joinpath("data/hardware.yaml").read_text()
    try:
        # libyaml's loader where PyYAML was built with it: the pure-Python one takes ~0.1 s of every light command
        return HardwareDB.model_validate(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except ValidationError as exc:  # a packaging bug, but still say where
        raise SolkitError(f"solkit/hardware/data/hardware.yaml is invalid: {exc.errors()[0]}") from exc


def list_specs() -> list[ArchSpec]:
    return list(load_db().records)


def arch_ids() -> list[str]:
    return [r.id for r in load_db().records]


def get_spec(arch_id: str) -> ArchSpec:
    """The record with this id (case-insensitive); a one-line error lists the known ids."""
    key = arch_id.strip().lower()
    for r in load_db().records:
        if r.id == key:
            return r
    raise SolkitError(choices_hint(arch_id, arch_ids(), "arch id"))


def cc_limits(compute_capability: str) -> CCLimits | None:
    """Per-SM limits and features of an NVIDIA compute capability (``"9.0"``); None for others (AMD, CPU)."""
    return load_db().compute_capabilities.get(compute_capability.strip())


def source_of(value: Sourced | SourcedFlag) -> Source:
    return load_db().sources[value.source]


def match_spec(name: str, sm_count: int | None = None, memory_bytes: int | None = None) -> ArchSpec | None:
    """Find the record for a live device: name pattern, then SM count and memory size must agree."""
    candidates = []
    for r in load_db().records:
        m = r.match
        if m.name_regex and not re.search(m.name_regex, name, flags=re.IGNORECASE):
            continue
        if m.sm_count is not None and sm_count is not None and m.sm_count != sm_count:
            continue
        if m.memory_gb_range is not None and memory_bytes is not None:
            lo, hi = m.memory_gb_range
            if not lo <= memory_bytes / 1e9 <= hi and not lo <= memory_bytes / 2**30 <= hi:
                continue
        candidates.append(r)
    return candidates[0] if candidates else None
