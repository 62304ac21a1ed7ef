"""Ceilings for T_SOL on either basis.

* ``spec``: the datasheet dense peaks of an arch record (any arch in the database, no GPU needed).
* ``calibrated``: the measured ceilings of the *present* device (``solkit calibrate``): the copy
  bandwidth, and the short-run median GEMM throughput per dtype. Units calibration does not measure
  (e.g. int8) fall back to the datasheet value, and the returned notes say so.

On a CPU there is no datasheet: both bases use the calibration, and the notes say so.
"""

from __future__ import annotations

from solkit.errors import SolkitError
from solkit.hardware.specs import get_spec
from solkit.sol.model import BASES, Ceilings


def spec_ceilings(arch: str) -> Ceilings:
    spec = get_spec(arch)
    return Ceilings(arch=spec.id, basis="spec", flops=spec.flops_by_unit(), bandwidth=spec.bandwidth)


def calibrated_ceilings(quick: bool = True, recalibrate: bool = False, cal=None, info=None) -> Ceilings:
    """Measured ceilings of the present device (runs a calibration when none is cached).

    Callers that already hold the device's ``info`` and calibration ``cal`` pass them in, so the
    device is not detected and the cache not read a second time.
    """
    from solkit.hardware.calibrate import get_calibration
    from solkit.hardware.detect import detect_device

    info = info or detect_device()
    cal = cal or get_calibration(recalibrate=recalibrate, quick=quick, info=info)
    measured = cal.flops_by_unit()
    notes: list[str] = []
    flops: dict[str, float] = {}
    if info.arch_id:
        spec = get_spec(info.arch_id)
        for unit, peak in spec.flops_by_unit().items():
            if unit not in measured:
                flops[unit] = peak
                notes.append(f"{unit}: not calibrated, datasheet value used")
    flops.update(measured)
    if "fp32_vector" in flops and "tf32_tensor" not in flops:
        notes.append("tf32_tensor: not calibrated; fp32 work is charged to fp32_vector")
    return Ceilings(
        arch=info.arch_id or f"{info.kind}-derived",
        basis="calibrated",
        flops=flops,
        bandwidth=cal.copy_bandwidth,
        notes=tuple(notes),
    )


def get_ceilings(arch: str | None = None, basis: str = "spec", quick: bool = True) -> Ceilings:
    """Ceilings for ``arch`` (default: the present device) on ``basis``."""
    if basis not in BASES:
        raise SolkitError(f"unknown basis {basis!r}; allowed: {', '.join(BASES)}")
    if basis == "spec" and arch is not None:  # a named product needs no device (nor torch)
        return spec_ceilings(arch)
    from solkit.hardware.detect import detect_device

    if basis == "spec":
        info = detect_device()
        if info.arch_id:
            return spec_ceilings(info.arch_id)
        if info.kind == "cpu":
            c = calibrated_ceilings(quick=quick, info=info)
            return Ceilings(c.arch, "calibrated", c.flops, c.bandwidth, ("a CPU has no datasheet: calibrated",))
        from solkit.hardware.detect import derived_spec

        spec = derived_spec(info)
        return Ceilings(spec.id, "spec", spec.flops_by_unit(), spec.bandwidth or 1.0, ("derived from properties",))
    info = detect_device()
    if arch is not None and info.arch_id != get_spec(arch).id:
        raise SolkitError(
            f"the calibrated basis exists only for the present device ({info.arch_id or info.name}); "
            f"use --basis spec for {arch}"
        )
    return calibrated_ceilings(quick=quick, info=info)
