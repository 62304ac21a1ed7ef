"""The profile driver: a small program run in its own process, once plainly and once under ncu.

    python -m solkit.profile.driver SPEC.json RESULT.json

SPEC = {"mode": "time" | "ncu" | "model", "device": "cuda", "warmup": 3, "targets": [{"label", "problem_dir",
"workload", "solution"}...]}.

* ``time`` (no profiler attached): per target, the harness's timing (T_measured; the targets of one
  problem interleaved A B B A over 4 trials), NVML telemetry during it, and torch.profiler's kernel
  list of one call (name, count, CUDA time). This is also
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


#: Timing trials per target; targets of one problem are interleaved A B B A ... so that warming up
#: (clocks dropping under the power cap as a GEMM loop heats the card) does not favour whichever
#: backend happens to be timed first.
TRIALS = 4


def _time_group(targets: list, device: str) -> dict[str, dict[str, Any]]:
    """Time the targets of one problem/workload interleaved; per label: timing, telemetry, kernels."""
    from solkit.hardware.telemetry import TelemetrySampler
    from solkit.timing import benchmark

    index = int(device.split(":")[1]) if ":" in device else 0
    on_gpu = device.startswith("cuda")
    trials: dict[str, list[dict]] = {t.label: [] for t in targets}
    tele: dict[str, list[dict]] = {t.label: [] for t in targets}
    errors: dict[str, str] = {}
    for trial in range(TRIALS if on_gpu else 1):
        order = targets if trial % 2 == 0 else targets[::-1]
        for target in order:
            if target.label in errors:
                continue
            try:
                with TelemetrySampler(device_index=index) as sampler:
                    if on_gpu:
                        r = benchmark(target.fn, [target.args], reps=30, trials=1, warmup=3 if trial == 0 else 1)
                    else:  # degraded mode: a rough host time is all a CPU run can say
                        r = benchmark(target.fn, [target.args], reps=3, trials=1, warmup=1)
                trials[target.label].append(r.to_dict())
                tele[target.label].append(sampler.summary())
            except Exception as exc:  # one target failing keeps the others' trials
                errors[target.label] = f"{type(exc).__name__}: {exc}"
    out: dict[str, dict[str, Any]] = {}
    for target in targets:
        if target.label in errors:
            out[target.label] = {"error": errors[target.label]}
            continue
        out[target.label] = {
            "timing": combine_trials(trials[target.label]),
            "telemetry": combine_telemetry(tele[target.label]),
            "kernels": _kernel_list(target, device, calls=3 if on_gpu else 1),
        }
    return out


def combine_trials(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """One timing record from interleaved single-trial records: the median of the trial medians."""
    import statistics

    if len(trials) == 1:
        return trials[0]
    medians = [t["median_ms"] for t in trials]
    out = dict(trials[0])
    mean = statistics.fmean(medians)
    out.update(
        median_ms=statistics.median(medians),
        mean_ms=mean,
        min_ms=min(t["min_ms"] for t in trials),
        max_ms=max(t["max_ms"] for t in trials),
        trials=len(trials),
        reps=sum(t["reps"] for t in trials),
        trial_medians_ms=medians,
        trial_methods=sorted({t["method"] for t in trials}),
        cv_between_trials=(statistics.pstdev(medians) / mean) if mean > 0 else 0.0,
        interleaved=True,
    )
    for key in ("q1_ms", "q3_ms", "iqr_ms", "cv"):
        out[key] = statistics.median(t[key] for t in trials)
    out["high_variance"] = any(t.get("high_variance") for t in trials) or out["cv_between_trials"] > 0.05
    return out


def combine_telemetry(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One telemetry summary over several sampling windows (the worst case of each quantity)."""
    from solkit.hardware.telemetry import decode_reasons, throttle_warning

    live = [s for s in summaries if s.get("available")]
    if len(summaries) == 1 or not live:
        return summaries[0] if summaries else {"available": False, "reason": "no sample"}
    out = dict(live[0])
    for key in ("sm_clock_mhz", "mem_clock_mhz"):
        vals = [s[key] for s in live if s.get(key)]
        if vals:
            out[key] = {
                "median": sorted(v["median"] for v in vals)[len(vals) // 2],
                "min": min(v["min"] for v in vals),
                "max": max(v["max"] for v in vals),
            }
    powers = [s["power_w"] for s in live if s.get("power_w")]
    if powers:
        out["power_w"] = {
            "max": max(p["max"] for p in powers),
            "median": sorted(p["median"] for p in powers)[len(powers) // 2],
        }
    temps = [s["temperature_c"] for s in live if s.get("temperature_c")]
    if temps:
        out["temperature_c"] = {"max": max(t["max"] for t in temps), "min": min(t["min"] for t in temps)}
    mask = 0
    for s in live:
        mask |= int(s.get("throttle_reasons_mask") or 0)
    n = sum(s.get("n_samples", 0) for s in live)
    out.update(
        n_samples=n,
        duration_s=round(sum(s.get("duration_s", 0.0) for s in live), 4),
        throttle_reasons_mask=mask,
        throttle_reasons=decode_reasons(mask),
        throttled=any(s.get("throttled") for s in live),
        throttled_fraction=(sum(s.get("throttled_fraction", 0.0) * s.get("n_samples", 0) for s in live) / n)
        if n
        else 0.0,
        windows=len(live),
    )
    out["warning"] = throttle_warning(out)
    return out


def _profile_target(target, device: str, warmup: int) -> None:
    import torch

    for _ in range(warmup):
        target.fn(*target.args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push(f"solkit:{target.label}")
    try:
        target.fn(*target.args)
        torch.cuda.synchronize()
    finally:  # a crash must not leave the profiler on for the next target's kernels
        torch.cuda.nvtx.range_pop()
        torch.cuda.profiler.stop()


#: On a CPU (degraded mode) only small workloads are run, so a report comes back in seconds.
CPU_MAX_BYTES = 4 << 20  # Triton solutions run in the (slow) interpreter there


def _fused_bytes(t: dict[str, Any]) -> float:
    from solkit.profile.target import fused_bytes, pick_workload, read_problem, resolve_axes

    definition, workloads = read_problem(t["problem_dir"])
    workload = pick_workload(workloads, t.get("workload"), t["problem_dir"])
    return fused_bytes(definition, resolve_axes(definition, workload))


def _groups(specs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive targets of one problem and workload (a reference and its solutions)."""
    groups: list[list[dict[str, Any]]] = []
    for t in specs:
        key = (t["problem_dir"], t.get("workload"))
        if groups and (groups[-1][0]["problem_dir"], groups[-1][0].get("workload")) == key:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


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
    for group in _groups(spec["targets"]):
        t0 = time.perf_counter()
        entries, loaded = [], []
        for t in group:  # load every target of the problem first (inputs built, FLOPs counted)
            entry: dict[str, Any] = {
                "label": t["label"],
                "problem_dir": t["problem_dir"],
                "solution": t.get("solution"),
            }
            entries.append(entry)
            try:
                if device == "cpu" and (nbytes := _fused_bytes(t)) > CPU_MAX_BYTES:
                    note = f"not run on the CPU: {nbytes / 2**20:.0f} MiB > {CPU_MAX_BYTES >> 20} MiB"
                    entry.update(ok=True, skipped=True, model_bytes=nbytes, model_flops={}, notes=[note])
                    continue
                target = load_target(t["problem_dir"], t.get("workload"), t.get("solution"), device, label=t["label"])
                entry.update(
                    problem=target.problem,
                    workload=target.workload,
                    kind=target.kind,
                    model_bytes=target.model_bytes,
                    model_flops=target.model_flops,
                    model_unfused_bytes=target.model_unfused_bytes,
                    model_source=target.model_source,
                    model_precision=target.model_precision,
                    notes=target.notes,
                    ok=True,
                )
                loaded.append(target)
            except Exception as exc:  # a failing target is recorded; the others still run
                _fail(entry, exc)
        by_label = {e["label"]: e for e in entries}
        if mode == "time" and loaded:
            for label, res in _time_group(loaded, device).items():
                if "error" in res:
                    by_label[label].update(ok=False, error=res["error"])
                else:
                    by_label[label].update(res)
        elif mode == "ncu":
            for target in loaded:
                try:
                    _profile_target(target, device, int(spec.get("warmup", 3)))
                except Exception as exc:
                    _fail(by_label[target.label], exc)
        wall = round(time.perf_counter() - t0, 3)
        for e in entries:
            e["group_wall_s"] = wall
        result["targets"].extend(entries)
        del loaded
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return result


def _fail(entry: dict[str, Any], exc: Exception) -> None:
    entry["ok"] = False
    entry["error"] = f"{type(exc).__name__}: {exc}"
    entry["traceback"] = traceback.format_exc(limit=6)


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
