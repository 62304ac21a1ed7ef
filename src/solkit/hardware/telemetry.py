"""GPU telemetry during a measurement: clocks, power, temperature and throttle reasons.

Why: a kernel's time depends on the clock it ran at. An H200 runs elementwise kernels near
1.98 GHz but a long bf16 GEMM drops to ~1.5 GHz at its 700 W power cap (NVML reason 0x4), so every
benchmark and profile records what the card did while it was measured, and warns when it throttled.

Sources, best first:

* NVML through ``pynvml`` (package ``nvidia-ml-py``, optional): cheap calls, sampled in a
  background thread every ``interval_s`` (default 50 ms);
* ``nvidia-smi --query-gpu`` when pynvml is missing (one subprocess per sample, so sampled
  every ``max(interval_s, 0.25)`` s);
* neither (a CPU machine, a sandbox without the driver): ``available: False`` and a reason,
  never an exception.

Usage::

    with TelemetrySampler(device_index=0) as t:
        run_benchmark()
    info = t.summary()   # median/min SM clock, max power, decoded throttle reasons, "throttled"

``snapshot(device_index)`` reads everything once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import threading
import time
from typing import Any

#: NVML clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that mean the clock was held below what the kernel would otherwise get. Idle, sync
#: boost, application-clock and display settings are states, not slow-downs of a busy GPU.
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

_SMI_FIELDS = (
    "name,uuid,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,power.limit,"
    "temperature.gpu,clocks_event_reasons.active"
)


def decode_reasons(mask: int | None) -> list[str]:
    """Names of the reason bits set in ``mask`` (unknown bits as hex)."""
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def _nvml_index(device_index: int) -> int:
    """NVML enumerates all GPUs; CUDA only the visible ones. Map a CUDA index to NVML's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        if device_index < len(parts) and parts[device_index].isdigit():
            return int(parts[device_index])
    return device_index


class _NvmlReader:
    """One open NVML handle. Raises at construction when NVML cannot be used."""

    source = "nvml"

    def __init__(self, device_index: int) -> None:
        import pynvml  # optional dependency: nvidia-ml-py

        self._nv = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(device_index))
        self._reason_fn = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )

    def _try(self, fn, *args) -> Any:
        try:
            return fn(self._handle, *args)
        except Exception:  # one unsupported query must not lose the others
            return None

    def static(self) -> dict[str, Any]:
        nv = self._nv
        name = self._try(nv.nvmlDeviceGetName)
        uuid = self._try(nv.nvmlDeviceGetUUID)
        limit = self._try(nv.nvmlDeviceGetEnforcedPowerLimit)
        return {
            "name": name.decode() if isinstance(name, bytes) else name,
            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "max_sm_clock_mhz": self._try(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM),
            "max_mem_clock_mhz": self._try(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_MEM),
            "power_limit_w": limit / 1000.0 if limit is not None else None,
        }

    def sample(self) -> dict[str, Any]:
        nv = self._nv
        power = self._try(nv.nvmlDeviceGetPowerUsage)
        return {
            "t": time.monotonic(),
            "sm_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
            "power_w": power / 1000.0 if power is not None else None,
            "temperature_c": self._try(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
            "reasons_mask": self._try(self._reason_fn),
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()


def _smi_number(text: str) -> float | None:
    text = text.strip().split(" ")[0]
    try:
        return float(text)
    except ValueError:
        return None


class _SmiReader:
    """``nvidia-smi --query-gpu`` fallback; each sample is one subprocess (~20-100 ms)."""

    source = "nvidia-smi"

    def __init__(self, device_index: int) -> None:
        self._exe = shutil.which("nvidia-smi")
        if not self._exe:
            raise RuntimeError("nvidia-smi not found")
        self._index = _nvml_index(device_index)
        self._last = self._query()  # raises when the driver does not answer

    def _query(self) -> dict[str, Any]:
        out = subprocess.run(
            [self._exe, f"--id={self._index}", f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:200]}")
        vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
        keys = _SMI_FIELDS.split(",")
        return dict(zip(keys, vals))

    def static(self) -> dict[str, Any]:
        q = self._last
        return {
            "name": q.get("name"),
            "uuid": q.get("uuid"),
            "max_sm_clock_mhz": _smi_number(q.get("clocks.max.sm", "")),
            "max_mem_clock_mhz": _smi_number(q.get("clocks.max.mem", "")),
            "power_limit_w": _smi_number(q.get("power.limit", "")),
        }

    def sample(self) -> dict[str, Any]:
        q = self._last = self._query()
        reasons = q.get("clocks_event_reasons.active", "")
        try:
            mask = int(reasons, 16)
        except ValueError:
            mask = None
        return {
            "t": time.monotonic(),
            "sm_clock_mhz": _smi_number(q.get("clocks.sm", "")),
            "mem_clock_mhz": _smi_number(q.get("clocks.mem", "")),
            "power_w": _smi_number(q.get("power.draw", "")),
            "temperature_c": _smi_number(q.get("temperature.gpu", "")),
            "reasons_mask": mask,
        }

    def close(self) -> None:
        pass


def _open_reader(device_index: int) -> tuple[Any | None, str | None]:
    """The best reader available, or (None, why none works)."""
    errors = []
    for cls in (_NvmlReader, _SmiReader):
        try:
            return cls(device_index), None
        except Exception as exc:  # ImportError, NVMLError, no driver, sandbox...
            errors.append(f"{cls.source}: {type(exc).__name__}: {str(exc).strip()[:120]}")
    return None, "; ".join(errors)


def _decorate(sample: dict[str, Any]) -> dict[str, Any]:
    mask = sample.get("reasons_mask")
    out = dict(sample)
    out.pop("t", None)
    out["throttle_reasons"] = decode_reasons(mask)
    out["throttled"] = bool(mask and mask & SLOWDOWN_MASK)
    return out


def snapshot(device_index: int = 0) -> dict[str, Any]:
    """Read clocks, power, temperature and throttle reasons once. Never raises."""
    reader, why = _open_reader(device_index)
    if reader is None:
        return {"available": False, "reason": why, "device_index": device_index}
    try:
        return (
            {"available": True, "source": reader.source, "device_index": device_index}
            | reader.static()
            | (_decorate(reader.sample()))
        )
    finally:
        reader.close()


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class TelemetrySampler:
    """Context manager that samples NVML in a background thread while the body runs.

    ``interval_s`` is the target period; a Python thread holding the GIL may stretch it (each
    NVML sample costs well under a millisecond, but the measured code competes for the GIL).
    The summary always has at least the samples taken at entry and exit.
    """

    def __init__(self, device_index: int = 0, interval_s: float = 0.05, keep_samples: bool = False) -> None:
        self.device_index = device_index
        self.interval_s = interval_s
        self.keep_samples = keep_samples
        self._samples: list[dict[str, Any]] = []
        self._reader: Any | None = None
        self._why: str | None = None
        self._static: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0

    def _take(self) -> None:
        try:
            self._samples.append(self._reader.sample())
        except Exception as exc:  # a driver hiccup ends sampling, never the measurement
            self._why = f"sampling stopped: {type(exc).__name__}: {exc}"
            self._stop.set()

    def _loop(self) -> None:
        period = self.interval_s if self._reader.source == "nvml" else max(self.interval_s, 0.25)
        while not self._stop.wait(period):
            self._take()

    def __enter__(self) -> TelemetrySampler:
        self._reader, self._why = _open_reader(self.device_index)
        self._t0 = time.monotonic()
        if self._reader is not None:
            self._static = self._reader.static()
            self._take()
            self._thread = threading.Thread(target=self._loop, name="solkit-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._t1 = time.monotonic()
        if self._reader is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._why is None or not self._why.startswith("sampling stopped"):
            self._take()
        self._reader.close()

    @property
    def samples(self) -> list[dict[str, Any]]:
        return list(self._samples)

    def summary(self) -> dict[str, Any]:
        """Median/min clocks, max power and temperature, union of throttle reasons, ``throttled``."""
        base: dict[str, Any] = {"device_index": self.device_index, "duration_s": round(self._t1 - self._t0, 4)}
        if self._reader is None:
            return base | {"available": False, "reason": self._why, "throttled": False, "n_samples": 0}
        s = self._samples

        def col(key: str) -> list[float]:
            return [float(x[key]) for x in s if x.get(key) is not None]

        masks = [int(x["reasons_mask"]) for x in s if x.get("reasons_mask") is not None]
        union = 0
        for m in masks:
            union |= m
        slowed = [m for m in masks if m & SLOWDOWN_MASK]
        power = col("power_w")
        temps = col("temperature_c")
        out = base | {
            "available": True,
            "source": self._reader.source,
            **self._static,
            "n_samples": len(s),
            "sm_clock_mhz": _stats(col("sm_clock_mhz")),
            "mem_clock_mhz": _stats(col("mem_clock_mhz")),
            "power_w": {"max": max(power), "median": statistics.median(power)} if power else None,
            "temperature_c": {"max": max(temps), "min": min(temps)} if temps else None,
            "throttle_reasons_mask": union,
            "throttle_reasons": decode_reasons(union),
            "throttled": bool(slowed),
            "throttled_fraction": len(slowed) / len(masks) if masks else 0.0,
        }
        if self._why:
            out["note"] = self._why
        out["warning"] = throttle_warning(out)
        if self.keep_samples:
            out["samples"] = [_decorate(x) | {"t_s": round(x["t"] - self._t0, 4)} for x in s]
        return out


def throttle_warning(summary: dict[str, Any]) -> str | None:
    """A one-line warning when the summary says the clocks were held down, else None."""
    if not summary.get("throttled"):
        return None
    reasons = [r for r in summary.get("throttle_reasons", []) if r not in ("gpu_idle", "sync_boost")]
    clock = summary.get("sm_clock_mhz") or {}
    frac = summary.get("throttled_fraction", 0.0)
    return (
        f"GPU throttled during the measurement ({', '.join(reasons)}; {frac:.0%} of samples; "
        f"SM clock median {clock.get('median', 0):.0f} MHz, min {clock.get('min', 0):.0f} MHz): "
        "times are sustained, power/thermal-limited figures"
    )
