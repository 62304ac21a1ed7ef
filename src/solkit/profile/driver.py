"""The profile driver: a small program run in its own process, once plainly and once under ncu.

    python -m solkit.profile.driver SPEC.json RESULT.json

SPEC = {"mode": "time" | "ncu" | "model", "device": "cuda", "warmup": 3, "targets": [{"label", "problem_dir",
"workload", "solution"}...]}.

* ``time`` (no profiler attached): per target, the harness's timing (T_measured), NVML telemetry
  during it, and torch.profiler's kernel list of one call (name, count, CUDA time). This is also
  all that remains when ncu is missing or cannot read counters.
* ``ncu``: per target, warm-up with the profiler off, then exactly one call between
  ``cudaProfilerStart``/``Stop`` inside an NVTX range ``solkit:<label>``, so ncu (run with
  ``--profile-from-start off --nvtx``) profiles only the measured call and can attribute kernels.

Each target runs in a try block: one failing target is recorded and the others still run.
Profilers are one per process (CUPTI allows one subscriber), which is why there are two runs.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections import defaultdict
from typing import Any


def _kernel_list(target, device: str, calls: int = 3) -> list[dict[str, Any]]:
    """torch.profiler's device-side events for ``calls`` calls, aggregated per kernel name, per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        for _ in range(calls):
            target.fn(*target.args)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    agg: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "time_us": 0.0})
    want_device = device.startswith("cuda")
    for e in prof.events():
        dev_type = str(getattr(e, "device_type", "")).split(".")[-1]
        if want_device and dev_type != "CUDA":
            continue
        if not want_device and (e.cpu_parent is not None or not e.name.startswith("aten::")):
            continue  # on a CPU: top-level aten ops only
        # A device event's own span is its kernel time (device_time_total can read 0 for it).
        t = e.time_range.elapsed_us() if want_device else e.cpu_time_total
        agg[e.name]["count"] += 1
        agg[e.name]["time_us"] += float(t or 0.0)
    rows = [
        {"name": n, "count_per_call": v["count"] / calls, "time_us_per_call": v["time_us"] / calls}
        for n, v in agg.items()
    ]
    return sorted(rows, key=lambda r: -r["time_us_per_call"])


def _time_target(target, device: str) -> dict[str, Any]:
    from solkit.hardware.telemetry import TelemetrySampler
    from solkit.harness.timing import benchmark

    index = int(device.split(":")[1]) if ":" in device else 0
    with TelemetrySampler(device_index=index) as tele:
        if device.startswith("cuda"):
            timing = benchmark(target.fn, [target.args], reps=30, trials=3, warmup=3)
        else:  # degraded mode: a rough host time is all a CPU run can say
            timing = benchmark(target.fn, [target.args], reps=3, trials=1, warmup=1)
    out = {"timing": timing.to_dict(), "telemetry": tele.summary()}
    out["kernels"] = _kernel_list(target, device, calls=3 if device.startswith("cuda") else 1)
    return out


def _profile_target(target, device: str, warmup: int) -> dict[str, Any]:
    import torch

    for _ in range(warmup):
        target.fn(*target.args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push(f"solkit:{target.label}")
    target.fn(*target.args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    return {}


#: On a CPU (degraded mode) only small workloads are run, so a report comes back in seconds.
CPU_MAX_BYTES = 4 << 20  # Triton solutions run in the (slow) interpreter there


def _fused_bytes(t: dict[str, Any]) -> float:
    from solkit.profile.target import fused_bytes, pick_workload, read_problem, resolve_axes

    definition, workloads = read_problem(t["problem_dir"])
    workload = pick_workload(workloads, t.get("workload"), t["problem_dir"])
    return fused_bytes(definition, resolve_axes(definition, workload))


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from solkit.profile.target import load_target

    device = spec.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    mode = spec.get("mode", "time")
    result: dict[str, Any] = {"mode": mode, "device": device, "targets": []}
    if device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(device)
    result["versions"] = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import triton

        result["versions"]["triton"] = triton.__version__
    except ImportError:
        pass
    for t in spec["targets"]:
        entry: dict[str, Any] = {"label": t["label"], "problem_dir": t["problem_dir"], "solution": t.get("solution")}
        t0 = time.perf_counter()
        try:
            if device == "cpu" and (nbytes := _fused_bytes(t)) > CPU_MAX_BYTES:
                note = f"not run on the CPU: {nbytes / 2**20:.0f} MiB > {CPU_MAX_BYTES >> 20} MiB"
                entry.update(ok=True, skipped=True, model_bytes=nbytes, model_flops={}, notes=[note])
                result["targets"].append(entry)
                continue
            target = load_target(t["problem_dir"], t.get("workload"), t.get("solution"), device, label=t["label"])
            entry.update(
                problem=target.problem,
                workload=target.workload,
                kind=target.kind,
                model_bytes=target.model_bytes,
                model_flops=target.model_flops,
                notes=target.notes,
            )
            if mode == "ncu":
                entry.update(_profile_target(target, device, int(spec.get("warmup", 3))))
            elif mode == "model":  # the work model only (the caller has its own timing)
                pass
            else:
                entry.update(_time_target(target, device))
            entry["ok"] = True
        except Exception as exc:  # a failing target is recorded; the others still run
            entry["ok"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc(limit=6)
        entry["wall_s"] = round(time.perf_counter() - t0, 3)
        result["targets"].append(entry)
        del entry
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write("usage: python -m solkit.profile.driver SPEC.json RESULT.json\n")
        return 2
    with open(argv[0]) as f:
        spec = json.load(f)
    result = run(spec)
    with open(argv[1], "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0 if all(t.get("ok") for t in result["targets"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
