"""Calibration: measure the ceilings the present device really reaches.

GPU:
  * bandwidth: copy (``dst.copy_(src)``, bytes = read + written), read-only (a sum) and write-only
    (``fill_``) on buffers at least 16x the L2 size, so the cache cannot serve them;
  * GEMM throughput per dtype (bf16, fp16, tf32, fp32 SIMT, fp64, fp8 where supported) on random data,
    never zeros (zeros switch fewer transistors and run faster), over a few large shapes. Three
    figures each: ``median`` (short-run median, what a benchmark sees), ``burst`` (the best 10 % of
    samples) and ``sustained`` (median over a continuous run of ~1 s, after power capping sets in);
  * SM clock, power and throttle reasons sampled by NVML when present (solkit.hardware.telemetry).
CPU: memory bandwidth (copy) and fp32/fp64 GEMM peaks through torch, wall clock.

It never changes clocks or power limits. Results are cached per device (uuid or name, driver, CUDA,
torch and triton versions) in the user cache directory; ``--recalibrate`` refreshes them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field

from solkit.hardware.detect import DeviceInfo, available_memory_bytes, detect_device
from solkit.paths import cache_dir
from solkit.timing import benchmark

GEMM_UNITS = {
    "bf16": "bf16_tensor",
    "fp16": "fp16_tensor",
    "tf32": "tf32_tensor",
    "fp32": "fp32_vector",
    "fp64": "fp64_tensor",
    "fp8": "fp8_tensor",
}


class Ceiling(BaseModel):
    """One measured ceiling."""

    value: float  # FLOP/s or bytes/s
    unit: str  # "FLOP/s" or "B/s"
    method: str
    size: str
    samples: int
    burst: float | None = None
    sustained: float | None = None
    sustained_seconds: float | None = None
    telemetry: dict[str, Any] | None = None
    shapes_tried: list[str] | None = None  # GEMMs: every shape measured; ``size`` is the best


class Calibration(BaseModel):
    """Everything one calibration run measured, as cached on disk."""

    device: dict[str, Any]
    cache_key: str
    timestamp: str
    quick: bool
    versions: dict[str, str]
    bandwidth: dict[str, Ceiling] = Field(default_factory=dict)  # copy, read, write
    gemm: dict[str, Ceiling] = Field(default_factory=dict)  # bf16, fp16, tf32, fp32, fp64, fp8
    telemetry: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    duration_s: float = 0.0

    @property
    def copy_bandwidth(self) -> float:
        return self.bandwidth["copy"].value

    def flops_by_unit(self) -> dict[str, float]:
        return {GEMM_UNITS[k]: c.value for k, c in self.gemm.items() if k in GEMM_UNITS}


def versions() -> dict[str, str]:
    v = {"torch": torch.__version__, "python": platform.python_version(), "cuda": str(torch.version.cuda)}
    try:
        import triton

        v["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        v["triton"] = "none"
    from solkit import __version__

    v["solkit"] = __version__
    return v


def cache_path(info: DeviceInfo) -> Path:
    digest = hashlib.sha1(info.cache_key.encode()).hexdigest()[:16]
    return cache_dir("calibration") / f"{info.kind}-{digest}.json"


def load_cached(info: DeviceInfo | None = None) -> Calibration | None:
    info = info or detect_device()
    path = cache_path(info)
    if not path.exists():
        return None
    try:
        return Calibration.model_validate_json(path.read_text())
    except Exception:  # noqa: BLE001 - a stale or corrupt cache is simply re-measured
        return None


def get_calibration(
    recalibrate: bool = False,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
    info: DeviceInfo | None = None,
    not_before: str | None = None,
):
    """The cached calibration of the present device (``info``, detected when not given), measuring it
    first when needed.

    The cache is per device (its UUID for a GPU) and safe for several processes: one lock file per device
    makes a second process wait for the first one's measurement and read it, instead of measuring at the same
    time on the same device; the file is replaced atomically. ``not_before`` (an ISO time): with
    ``recalibrate``, a calibration measured since then counts as fresh (the workers of one device share it).
    """
    info = info or detect_device()
    path = cache_path(info)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = load_cached(info)
        fresh = cached is not None and not_before is not None and cached.timestamp >= not_before
        if cached is not None and (not recalibrate or fresh) and (quick or not cached.quick):
            return cached
        cal = run_calibration(info, quick=quick, progress=progress)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(cal.model_dump_json(indent=2))
        os.replace(tmp, path)
    return cal


def _telemetry(index: int):
    try:
        from solkit.hardware.telemetry import TelemetrySampler

        return TelemetrySampler(device_index=index)
    except Exception:  # noqa: BLE001 - NVML optional
        return contextlib.nullcontext()


def _summary(sampler) -> dict[str, Any] | None:
    try:
        return sampler.summary()
    except Exception:  # noqa: BLE001
        return None


def run_calibration(info: DeviceInfo, quick: bool = False, progress: Callable[[str], None] | None = None):
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    cal = Calibration(
        device=info.to_dict(),
        cache_key=info.cache_key,
        timestamp=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        quick=quick,
        versions=versions(),
    )
    if info.kind == "cuda":
        _calibrate_gpu(cal, info, quick, say)
    else:
        _calibrate_cpu(cal, quick, say)
    cal.duration_s = time.perf_counter() - t0
    return cal


# ----------------------------------------------------------------------------------------------- GPU


def _bandwidth_gpu(cal: Calibration, info: DeviceInfo, quick: bool, say) -> None:
    dev = torch.device("cuda", info.index)
    l2 = info.l2_bytes or 64 * 2**20
    nbytes = max(16 * l2, 2**28 if quick else 2**30)
    n = nbytes // 2
    src = torch.randn(n, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    reps = 10 if quick else 30
    cases = {
        "copy": (lambda: dst.copy_(src), 2 * nbytes, "dst.copy_(src)"),
        "read": (lambda: src.sum(dtype=torch.float32), nbytes, "src.sum(dtype=float32)"),
        "write": (lambda: dst.fill_(1.0), nbytes, "dst.fill_(1.0)"),
    }
    for name, (fn, moved, method) in cases.items():
        say(f"bandwidth: {name}")
        r = benchmark(fn, method="events", reps=reps, trials=3, flush_l2=False, device=dev)
        cal.bandwidth[name] = Ceiling(
            value=moved / (r.median_ms * 1e-3),
            burst=moved / (r.min_ms * 1e-3),
            unit="B/s",
            method=f"{method}, CUDA events, median",
            size=f"{nbytes / 2**30:.2f} GiB per buffer (>= 16x L2)",
            samples=r.reps * r.trials,
        )
    src = dst = None  # free 2x the buffer before the GEMMs
    torch.cuda.empty_cache()


def _gemm_operands(dtype_name: str, shape: tuple[int, int, int], dev: torch.device):
    m, n, k = shape
    if dtype_name == "fp8":
        a = torch.randn(m, k, device=dev).clamp(-2, 2).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).clamp(-2, 2).to(torch.float8_e4m3fn).t()  # column-major B
        one = torch.ones((), device=dev)
        return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), (a, b)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}.get(
        dtype_name, torch.float64
    )
    a = torch.randn(m, k, device=dev, dtype=dtype)
    b = torch.randn(k, n, device=dev, dtype=dtype)
    out = torch.empty(m, n, device=dev, dtype=dtype)
    return (lambda: torch.mm(a, b, out=out)), (a, b, out)


#: GPU idle before each timed GEMM in a full calibration (ms): each call starts at the clock of an
#: isolated launch. Back to back, the H200's power cap pulls a 1 ms bf16 GEMM from ~1.6 to ~1.37 GHz
#: within tens of milliseconds; the sustained figure is measured separately.
GEMM_COOLDOWN_MS = 20.0

#: GEMM shapes (M, N, K) tried per dtype; the ceiling is the best median among them. The 16-bit list
#: holds the LLM projection shapes the bench times: a ceiling from square shapes alone was beaten by
#: cuBLAS on 8192x4096x4096 on the H200 (docs/sol.md has what is still left of that gap).
GEMM_SHAPES: dict[str, list[tuple[int, int, int]]] = {
    "bf16": [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 4096), (16384, 4096, 4096), (8192, 14336, 4096),
             (8192, 4096, 14336), (8192, 8192, 4096)],
    "fp16": [(8192, 8192, 8192), (8192, 4096, 4096), (8192, 14336, 4096)],
    "tf32": [(8192, 8192, 8192)],
    "fp32": [(4096, 4096, 4096)],
    "fp64": [(4096, 4096, 4096)],
    "fp8": [(8192, 8192, 8192), (8192, 4096, 4096), (8192, 14336, 4096)],
}  # fmt: skip


def _gemm_gpu(cal: Calibration, info: DeviceInfo, quick: bool, say) -> None:
    dev = torch.device("cuda", info.index)
    major = int((info.compute_capability or "0.0").split(".")[0])
    minor = int((info.compute_capability or "0.0").split(".")[1])
    dtypes = ["bf16", "fp16", "tf32", "fp32", "fp64"]
    if (major, minor) >= (8, 9) and hasattr(torch, "_scaled_mm"):
        dtypes.append("fp8")
    sustain_s = 0.25 if quick else 1.0
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name in dtypes:
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            best: tuple[float, str, float, Any] | None = None
            shapes = GEMM_SHAPES[name][:1] if quick else GEMM_SHAPES[name]
            for shape in shapes:
                size = "x".join(map(str, shape))
                say(f"gemm: {name} {size}")
                try:
                    fn, keep = _gemm_operands(name, shape, dev)
                    r, protocol = _time_gemm(fn, dev, quick)
                except Exception as exc:  # noqa: BLE001 - a dtype the device/library lacks is skipped, noted
                    cal.warnings.append(f"gemm {name} {size}: {type(exc).__name__}: {exc}".splitlines()[0])
                    continue
                flops = 2.0 * shape[0] * shape[1] * shape[2]
                if best is None or flops / r.median_ms > best[0]:
                    best = (flops / r.median_ms, size, flops, (fn, keep, r, protocol))
                else:
                    del fn, keep, r  # free this shape's operands before the next
                    torch.cuda.empty_cache()
            if best is None:
                continue
            _, size, flops, (fn, keep, r, protocol) = best
            samples = sorted(flops / (t * 1e-3) for t in _raw_samples(r))
            sustained, telem = _sustain(fn, flops, sustain_s, info.index)
            cal.gemm[name] = Ceiling(
                value=flops / (r.median_ms * 1e-3),
                burst=samples[int(0.9 * (len(samples) - 1))] if samples else None,
                sustained=sustained,
                sustained_seconds=sustain_s,
                unit="FLOP/s",
                method=("torch._scaled_mm, scales 1.0, bf16 out" if name == "fp8" else "torch.mm")
                + ", random normal inputs, CUDA events, L2 flushed"
                + f", {protocol}",
                size=size,
                shapes_tried=["x".join(map(str, s)) for s in shapes],
                samples=r.reps * r.trials,
                telemetry=telem,
            )
            del keep
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32


def _time_gemm(fn, dev: torch.device, quick: bool):
    """Median time of one GEMM shape: the better of isolated launches and back-to-back launches.

    Isolated launches (the GPU idles GEMM_COOLDOWN_MS before each call) start at the clock of a cold
    GPU; back to back, the power cap lowers the clock within milliseconds, but some shapes still run
    faster that way (cuBLAS's 8192x4096x4096 on the H200: 795 TFLOP/s back to back against a 786
    isolated median). The ceiling is what the device reaches, so each shape keeps its better median;
    a quick calibration times back to back only. Returns (TimingResult, protocol description).
    """
    reps = 10 if quick else 20
    back = benchmark(fn, method="events", reps=reps, trials=3, flush_l2=True, device=dev)
    if quick:
        return back, "back-to-back launches"
    iso = benchmark(fn, method="events", reps=reps, trials=3, flush_l2=True, device=dev, cooldown_ms=GEMM_COOLDOWN_MS)
    if iso.median_ms <= back.median_ms:
        return iso, f"isolated launches ({GEMM_COOLDOWN_MS:g} ms idle before each; back to back was slower)"
    return back, f"back-to-back launches (faster than isolated launches with {GEMM_COOLDOWN_MS:g} ms idle)"


def _raw_samples(r) -> list[float]:
    return r.samples_ms or [r.median_ms]


def _sustain(fn, flops: float, seconds: float, index: int) -> tuple[float, dict | None]:
    """Run ``fn`` back to back for ``seconds``; median throughput over the second half."""
    starts, ends = [], []
    sampler = _telemetry(index)
    with sampler:
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            starts.append(s)
            ends.append(e)
            if len(starts) % 16 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    tail = times[len(times) // 2 :] or times
    return flops / (statistics.median(tail) * 1e-3), _summary(sampler)


def _calibrate_gpu(cal: Calibration, info: DeviceInfo, quick: bool, say) -> None:
    sampler = _telemetry(info.index)
    with sampler:
        _bandwidth_gpu(cal, info, quick, say)
        _gemm_gpu(cal, info, quick, say)
    cal.telemetry = _summary(sampler)
    if cal.telemetry and cal.telemetry.get("throttled"):
        cal.warnings.append(f"the GPU throttled during calibration: {cal.telemetry.get('throttle_reasons')}")


# ----------------------------------------------------------------------------------------------- CPU


def cpu_llc_bytes() -> int | None:
    """The largest CPU cache (the last level), from sysfs; None where the system does not say."""
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            best = max(best, int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or None


def cpu_stream_bytes(quick: bool) -> tuple[int, str]:
    """Bytes per array of the STREAM-like kernels and why: 4x the last-level cache (STREAM's rule), at least
    256 MiB, at most 1 GiB and an eighth of the available memory (triad holds three arrays); quick: 64 MiB."""
    if quick:
        return 64 * 2**20, "quick: 64 MiB per array, may partly fit in the last-level cache"
    llc = cpu_llc_bytes()
    want = max(4 * (llc or 0), 256 * 2**20)
    cap = min(2**30, (available_memory_bytes() or 2**33) // 8)
    n = max(min(want, cap), 64 * 2**20)
    why = f"{n / 2**20:.0f} MiB per array; last-level cache {llc / 2**20:.0f} MiB" if llc else f"{n / 2**20:.0f} MiB"
    if llc and n < 4 * llc:
        why += f" (only {n / llc:.1f}x it: memory caps the arrays, so the cache may serve part of them)"
    return n, why


#: CPU GEMM peaks measured per dtype (torch.matmul), by Calibration.gemm key.
CPU_GEMM_DTYPES = (("fp32", torch.float32), ("fp64", torch.float64), ("bf16", torch.bfloat16), ("fp16", torch.float16))


def _calibrate_cpu(cal: Calibration, quick: bool, say) -> None:
    # STREAM-like bandwidth (copy: 2 arrays of traffic, triad a = b + s*c: 3) over arrays beyond the last-level
    # cache, then a GEMM peak per dtype through torch.matmul. Wall clock; the median of reps x 3 trials.
    nbytes, why = cpu_stream_bytes(quick)
    reps = 3 if quick else 5
    a = torch.empty(nbytes // 4)
    b = torch.rand(nbytes // 4)
    c = torch.rand(nbytes // 4)
    for name, fn, traffic in (
        ("copy", lambda: a.copy_(b), 2),
        ("triad", lambda: torch.add(b, c, alpha=3.0, out=a), 3),
    ):
        say(f"bandwidth: {name} ({nbytes / 2**20:.0f} MiB arrays)")
        r = benchmark(fn, method="wall", reps=reps, trials=3, warmup=1, device="cpu")
        cal.bandwidth[name] = Ceiling(
            value=traffic * nbytes / (r.median_ms * 1e-3),
            burst=traffic * nbytes / (r.min_ms * 1e-3),
            unit="B/s",
            method=f"STREAM-like {name} ({traffic} arrays of traffic), {torch.get_num_threads()} threads, "
            "wall clock, median",
            size=why,
            samples=r.reps * r.trials,
        )
    a = b = c = None
    n = 512 if quick else 1024
    for name, dtype in CPU_GEMM_DTYPES:
        say(f"gemm: {name} {n}^3")
        x, y = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out = torch.empty(n, n, dtype=dtype)
        try:
            r = benchmark(lambda x=x, y=y, out=out: torch.matmul(x, y, out=out), method="wall", reps=reps,
                          trials=3, warmup=1, device="cpu")  # fmt: skip
        except RuntimeError as exc:  # a dtype this CPU build has no matmul for
            cal.warnings.append(f"gemm {name}: not measured ({str(exc).splitlines()[0][:120]})")
            continue
        flops = 2.0 * n**3
        cal.gemm[name] = Ceiling(
            value=flops / (r.median_ms * 1e-3),
            burst=flops / (r.min_ms * 1e-3),
            unit="FLOP/s",
            method=f"torch.matmul ({torch.get_num_threads()} threads), random inputs, wall clock",
            size=f"{n}x{n}x{n}",
            samples=r.reps * r.trials,
        )
    if quick:
        cal.warnings.append("quick calibration: small arrays and GEMMs, few repetitions; "
                            "`solkit calibrate --recalibrate` measures properly")  # fmt: skip


def to_json(cal: Calibration) -> dict[str, Any]:
    return json.loads(cal.model_dump_json())
