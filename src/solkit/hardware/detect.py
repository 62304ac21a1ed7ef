"""Detect the present device and map it to a hardware-database record.

A known GPU maps to its record (matched by name pattern, SM count and memory size). An unknown GPU
gets a record *derived* from its properties and its family's per-SM rates, with a warning: its peaks
are estimates until ``solkit calibrate`` measures the ceilings. No GPU means the CPU, whose record is
built from calibration at run time (see :mod:`solkit.hardware.calibrate`).
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from solkit.hardware.specs import ArchSpec, Sourced, get_spec, match_spec

# Dense FLOP per clock per SM, by (major CC) family, used only to derive peaks for unknown GPUs.
_PER_CLK_PER_SM = {
    8: {"fp32_vector": 256, "tf32_tensor": 1024, "bf16_tensor": 2048, "fp16_tensor": 2048, "int8_tensor": 4096},
    9: {
        "fp64_vector": 128,
        "fp64_tensor": 256,
        "fp32_vector": 256,
        "tf32_tensor": 2048,
        "bf16_tensor": 4096,
        "fp16_tensor": 4096,
        "fp8_tensor": 8192,
        "int8_tensor": 8192,
    },
    10: {"fp32_vector": 256, "tf32_tensor": 4096, "bf16_tensor": 8192, "fp16_tensor": 8192, "fp8_tensor": 16384},
}


@dataclass
class DeviceInfo:
    """What the present device says about itself."""

    kind: str  # "cuda" or "cpu"
    name: str
    index: int = 0
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    compute_capability: str | None = None
    uuid: str | None = None
    driver: str | None = None
    cuda_version: str | None = None
    cpu_count: int | None = None
    arch_id: str | None = None  # matched record id, or None when derived
    derived: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def cache_key(self) -> str:
        ident = self.uuid or f"{self.name}-{self.sm_count}-{self.memory_bytes}"
        return f"{ident}|driver={self.driver}|cuda={self.cuda_version}|torch={torch.__version__}|triton={_triton()}"


def available_memory_bytes() -> int | None:
    """The host's available memory (``MemAvailable`` of ``/proc/meminfo``), None where that cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _triton() -> str:
    try:
        import triton

        return triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional
        return "none"


def _nvml_info(index: int, uuid: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        # By UUID when torch gives one: NVML counts every GPU of the host and ignores CUDA_VISIBLE_DEVICES, so
        # index 0 of a worker pinned to GPU 3 is GPU 0 to NVML.
        uid = f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else uuid
        h = pynvml.nvmlDeviceGetHandleByUUID(uid) if uid else pynvml.nvmlDeviceGetHandleByIndex(index)
        got = pynvml.nvmlDeviceGetUUID(h)
        out["uuid"] = got.decode() if isinstance(got, bytes) else got
    except Exception:  # noqa: BLE001 - NVML is optional; absence is normal on CPU machines
        pass
    return out


def detect_device(device: str | torch.device | None = None) -> DeviceInfo:
    """Describe ``device`` (default: the current CUDA device, else the CPU) and match a record."""
    dev = torch.device(device) if device is not None else None
    if (dev is None and torch.cuda.is_available()) or (dev is not None and dev.type == "cuda"):
        index = dev.index if dev is not None and dev.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        info = DeviceInfo(
            kind="cuda",
            name=p.name,
            index=index,
            sm_count=p.multi_processor_count,
            memory_bytes=p.total_memory,
            l2_bytes=getattr(p, "L2_cache_size", None),
            compute_capability=f"{p.major}.{p.minor}",
            cuda_version=torch.version.cuda or getattr(torch.version, "hip", None),
            uuid=str(getattr(p, "uuid", "")) or None,
        )
        info.__dict__.update({k: v for k, v in _nvml_info(index, info.uuid).items() if v})
        spec = match_spec(p.name, p.multi_processor_count, p.total_memory)
        if spec is not None:
            info.arch_id = spec.id
        else:
            info.derived = True
            info.warnings.append(
                f"unknown GPU {p.name!r} ({p.multi_processor_count} SMs): peaks derived from its properties; "
                "run `solkit calibrate` for measured ceilings"
            )
        return info
    return DeviceInfo(
        kind="cpu", name=platform.processor() or platform.machine() or "cpu", cpu_count=os.cpu_count(), derived=True
    )


def spec_for(info: DeviceInfo) -> ArchSpec:
    """The database record for ``info``, or one derived from its properties (GPU) or from nothing (CPU)."""
    if info.arch_id:
        return get_spec(info.arch_id)
    return derived_spec(info)


def derived_spec(
    info: DeviceInfo, calibrated: dict[str, float] | None = None, bandwidth: float | None = None
) -> ArchSpec:
    """Build a record for a device the database does not know.

    GPUs: SM count x per-SM rate of the family x an assumed 1.5 GHz clock (marked low-confidence);
    CPUs: only what calibration measured (``calibrated`` FLOP/s per unit, ``bandwidth`` bytes/s).
    """

    def val(v: float, note: str, kind: str = "low-confidence") -> Sourced:
        return Sourced(value=v, source="device", kind=kind, note=note)

    peaks: dict[str, Sourced] = {}
    if info.kind == "cuda" and info.compute_capability:
        major = int(info.compute_capability.split(".")[0])
        rates = _PER_CLK_PER_SM.get(major, _PER_CLK_PER_SM[8])
        for unit, per_clk in rates.items():
            peaks[unit] = val(per_clk * (info.sm_count or 1) * 1.5e9 / 1e12, "derived: SMs x FLOP/clk/SM x 1.5 GHz")
    for unit, flops in (calibrated or {}).items():
        peaks[unit] = val(flops / 1e12, "measured by solkit calibrate", kind="measured")
    bw = bandwidth or 0.0
    return ArchSpec(
        id=f"{info.kind}-derived",
        vendor="unknown",
        name=info.name,
        family="unknown",
        compute_capability=info.compute_capability or "cpu",
        sm_count=val(info.sm_count or info.cpu_count or 1, "device properties", kind="derived"),
        boost_clock_mhz=val(1500 if info.kind == "cuda" else 0, "assumed"),
        memory_bytes=val(info.memory_bytes or 0, "device properties", kind="derived"),
        memory_bandwidth_gbs=val(bw / 1e9, "measured by solkit calibrate" if bw else "unknown", kind="measured"),
        l2_bytes=val(info.l2_bytes or 0, "device properties", kind="derived"),
        peaks_tflops=peaks,
        derived_from_device=True,
    )
