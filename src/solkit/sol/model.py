"""The speed-of-light model: pure functions, no GPU needed.

    T_SOL = max( max_u FLOPs_u / peak_u ,  bytes / bandwidth )

FLOPs are split by the math unit that does them (``bf16_tensor``, ``fp32_vector``, ...; see
:data:`solkit.hardware.specs.UNITS`), because a softmax's fp32 arithmetic and a GEMM's bf16
tensor-core work run on different units at very different rates. Different units can run at the
same time (an attention kernel overlaps its softmax with its MMAs), so the compute term is the
*largest* per-unit time, not their sum: T_SOL stays a true lower bound, and a kernel that overlaps
perfectly can reach it. See docs/sol.md.

Two bases, always labelled:

* ``spec``: the datasheet dense peaks and bandwidth of the arch record;
* ``calibrated``: the ceilings measured on the present device by ``solkit calibrate``.

A measured time below T_SOL is a *violation* (a model or timer bug): it is reported, and the SOL
fraction is capped at 1 with ``violation=True``, never silently scored above 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from solkit.errors import SolkitError, choices_hint

Basis = Literal["spec", "calibrated"]
BASES = ("spec", "calibrated")
UNIT_FALLBACK = {"tf32_tensor": "fp32_vector"}


@dataclass(frozen=True)
class Ceilings:
    """Throughput ceilings used as the denominators of T_SOL.

    ``flops`` maps a math unit (e.g. ``"bf16_tensor"``) to FLOP/s; ``bandwidth`` is bytes/s
    (bytes read plus bytes written).
    """

    arch: str
    basis: str
    flops: Mapping[str, float]
    bandwidth: float
    notes: tuple[str, ...] = ()

    def peak(self, unit: str) -> float:
        value = self.flops.get(unit)
        if not value and unit in UNIT_FALLBACK:
            # TF32 is a permission, not a unit every device has: without TF32 tensor cores (a CPU) the same fp32
            # work runs on the fp32 vector units, so it is charged there (the ceilings' notes say so).
            value = self.flops.get(UNIT_FALLBACK[unit])
        if not value:
            raise SolkitError(choices_hint(unit, [u for u, v in self.flops.items() if v], f"math unit on {self.arch}"))
        return float(value)

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "basis": self.basis, "flops": dict(self.flops), "bandwidth": self.bandwidth}


@dataclass
class SolResult:
    """T_SOL and its two terms for one piece of work on one set of ceilings."""

    t_sol_s: float
    t_compute_s: float
    t_memory_s: float
    bound: str  # "compute" or "memory"
    flops_total: float
    bytes_total: float
    arithmetic_intensity: float  # FLOP per byte
    ridge_point: float  # FLOP per byte where the roofs meet, for the dominant unit
    arch: str
    basis: str
    per_unit_s: dict[str, float] = field(default_factory=dict)

    @property
    def t_sol_ms(self) -> float:
        return self.t_sol_s * 1e3

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["t_sol_ms"] = self.t_sol_ms
        return d


def t_sol(flops: Mapping[str, float], bytes_moved: float, ceilings: Ceilings) -> SolResult:
    """Compute T_SOL for ``flops`` (unit -> FLOPs) and ``bytes_moved`` on ``ceilings``."""
    if bytes_moved < 0 or not _finite(bytes_moved):
        raise SolkitError(f"bytes must be a finite number >= 0, got {bytes_moved}")
    per_unit: dict[str, float] = {}
    for unit, count in flops.items():
        if count < 0 or not _finite(count):
            raise SolkitError(f"flops for {unit} must be a finite number >= 0, got {count}")
        if count == 0:
            continue
        per_unit[unit] = count / ceilings.peak(unit)
    t_compute = max(per_unit.values(), default=0.0)
    t_memory = bytes_moved / ceilings.bandwidth if bytes_moved else 0.0
    total_flops = float(sum(flops.values()))
    dominant = max(per_unit, key=per_unit.get) if per_unit else None
    ridge = ceilings.peak(dominant) / ceilings.bandwidth if dominant else 0.0
    return SolResult(
        t_sol_s=max(t_compute, t_memory),
        t_compute_s=t_compute,
        t_memory_s=t_memory,
        bound="compute" if t_compute >= t_memory and t_compute > 0 else "memory",
        flops_total=total_flops,
        bytes_total=float(bytes_moved),
        arithmetic_intensity=total_flops / bytes_moved if bytes_moved else float("inf"),
        ridge_point=ridge,
        arch=ceilings.arch,
        basis=ceilings.basis,
        per_unit_s=per_unit,
    )


@dataclass
class SolScore:
    """How a measured time compares with T_SOL."""

    sol_fraction: float  # T_SOL / T_measured, capped at 1
    raw_fraction: float  # uncapped, for diagnosis
    violation: bool  # True when T_measured < T_SOL (model or timer error)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sol_fraction(t_sol_s: float, t_measured_s: float) -> SolScore:
    """The seed's SOL score, T_SOL / T_measured, with violations flagged rather than scored above 1."""
    if t_measured_s <= 0:
        raise SolkitError(f"measured time must be > 0, got {t_measured_s}")
    raw = t_sol_s / t_measured_s
    return SolScore(sol_fraction=min(raw, 1.0), raw_fraction=raw, violation=raw > 1.0)


def anchored_score(t_kernel_s: float, t_baseline_s: float, t_sol_s: float) -> float:
    """SOL-ExecBench's anchored score S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)).

    1.0 at the speed of light, 0.5 at the baseline's time, -> 0 when much slower. Undefined when the
    baseline is at or below T_SOL; then this returns NaN.
    """
    denom = t_baseline_s - t_sol_s
    if denom <= 0:
        return float("nan")
    return 1.0 / (1.0 + max(t_kernel_s - t_sol_s, 0.0) / denom)


def mfu(flops: float, t_measured_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak (use HFU's FLOPs for recomputation)."""
    if t_measured_s <= 0 or peak_flops <= 0:
        raise SolkitError("mfu needs a positive time and peak")
    return flops / t_measured_s / peak_flops


def bandwidth_utilization(bytes_moved: float, t_measured_s: float, bandwidth: float) -> float:
    """The memory-bound analogue of MFU: achieved bytes/s over the bandwidth ceiling."""
    if t_measured_s <= 0 or bandwidth <= 0:
        raise SolkitError("bandwidth utilisation needs a positive time and bandwidth")
    return bytes_moved / t_measured_s / bandwidth


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))
