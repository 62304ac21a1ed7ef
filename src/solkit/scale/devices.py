"""Which devices a job runs on (``--devices``), and who a device is (a stable UUID and a name).

``--devices`` takes ``all`` (every CUDA device), indices (``0,1,3``), or CPU workers (``cpu,cpu`` or
``cpu:4``). GPUs and CPU workers are not mixed in one run: one results file compares rows of one kind.

A device's identity is what a row carries so that it is only ever compared with rows of the same card:
a GPU's UUID as nvidia-smi prints it (``GPU-…``), a CPU's id a hash of the machine id, host name and CPU
model (every CPU worker of one machine shares it: they share the cores and the memory bus).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from solkit.errors import SolkitError


@dataclass(frozen=True)
class DeviceSlot:
    """One worker of a local pool: a CUDA device (by index on this host) or one CPU worker."""

    kind: str  # "cuda" | "cpu"
    index: int  # CUDA: the device index on this host; CPU: the worker's number

    @property
    def label(self) -> str:
        return f"cuda:{self.index}" if self.kind == "cuda" else f"cpu#{self.index}"

    def env(self) -> dict[str, str]:
        """The environment that pins a worker to this slot (a CPU worker sees no GPU at all)."""
        return {"CUDA_VISIBLE_DEVICES": str(self.index) if self.kind == "cuda" else ""}

    @property
    def device(self) -> str:
        """The torch device string inside the pinned worker."""
        return "cuda:0" if self.kind == "cuda" else "cpu"


def _driver_count() -> int | None:
    """CUDA devices visible to this process, from the driver (``cuDeviceGetCount``, honouring
    ``CUDA_VISIBLE_DEVICES`` as torch does), without importing torch; None when the driver cannot say."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0  # no driver: torch would see no device either
    count = ctypes.c_int(0)
    rc = lib.cuInit(0)
    if rc == 100:  # CUDA_ERROR_NO_DEVICE
        return 0
    if rc != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    return count.value


def _cuda_count() -> int:
    # A local pool's workers start before the command imports torch (seconds on a GPU host), so that their own
    # start-up overlaps the command's; counting the devices must not import torch first.
    if "torch" not in sys.modules and sys.platform.startswith("linux"):
        n = _driver_count()
        if n is not None:
            return n
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_devices(spec: str, flag: str = "--devices") -> list[DeviceSlot]:
    """``all`` | ``0,1,3`` | ``cpu,cpu`` | ``cpu:N`` -> the slots; anything else is one line naming the flag."""
    text = (spec or "").strip().lower()
    if not text:
        raise SolkitError(f"{flag}: empty; give all, GPU indices (0,1,3), cpu,cpu or cpu:N")
    if text.startswith("cpu:"):
        n = text[4:]
        if not n.isdigit() or int(n) < 1:
            raise SolkitError(f"{flag} {spec!r}: cpu:N needs a whole number of workers >= 1")
        return [DeviceSlot("cpu", i) for i in range(int(n))]
    if text == "all":
        count = _cuda_count()
        if count == 0:
            raise SolkitError(f"{flag} all: no CUDA device here; use cpu,cpu or cpu:N for CPU workers")
        return [DeviceSlot("cuda", i) for i in range(count)]
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if all(p == "cpu" for p in parts):
        return [DeviceSlot("cpu", i) for i in range(len(parts))]
    if not all(p.isdigit() for p in parts):
        bad = next(p for p in parts if not p.isdigit())
        raise SolkitError(f"{flag} {spec!r}: {bad!r} is neither a GPU index nor cpu (GPUs and CPUs are not mixed)")
    indices = [int(p) for p in parts]
    if len(set(indices)) != len(indices):
        raise SolkitError(f"{flag} {spec!r}: a GPU is named twice (one worker per device)")
    count = _cuda_count()
    missing = [i for i in indices if i >= count]
    if missing:
        raise SolkitError(f"{flag} {spec!r}: no CUDA device {missing[0]} here ({count} visible)")
    return [DeviceSlot("cuda", i) for i in indices]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _machine_id() -> str:
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(p).read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return ""


@functools.lru_cache(maxsize=1)
def cpu_identity() -> dict[str, str]:
    """This machine's CPU: ``{"uuid": "CPU-<12 hex>", "name": model, "kind": "cpu", "host": ...}`` (stable)."""
    model, host = _cpu_model(), socket.gethostname()
    digest = hashlib.sha256(f"{_machine_id()}|{host}|{model}".encode()).hexdigest()[:12]
    return {"uuid": f"CPU-{digest}", "name": model, "kind": "cpu", "host": host}


@functools.lru_cache(maxsize=16)
def cuda_identity(index: int = 0) -> dict[str, str]:
    """CUDA device ``index`` as this process sees it: ``{"uuid": "GPU-…", "name": ..., "kind": "cuda", ...}``."""
    import torch

    p = torch.cuda.get_device_properties(index)
    raw = str(getattr(p, "uuid", "") or "")
    fallback = f"GPU-{p.name}-bus{getattr(p, 'pci_bus_id', index)}"  # no UUID reported: name and PCI bus
    uuid = raw if raw.startswith("GPU-") else (f"GPU-{raw}" if raw else fallback)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {"uuid": uuid, "name": p.name, "kind": "cuda", "host": socket.gethostname(),
            "visible": visible if visible is not None else ""}  # fmt: skip


def device_identity(device: str) -> dict[str, str]:
    """The identity of a torch device string (``cpu``, ``cuda``, ``cuda:N``) in this process."""
    if device.startswith("cuda"):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        return cuda_identity(index)
    return cpu_identity()
