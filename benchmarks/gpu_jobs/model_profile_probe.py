"""Where does `solkit model` count kernel time twice? One HF Llama train step (AdamW foreach) profiled as
solkit.model.analyze profiles it, with and without solkit's module and optimizer ranges, and the raw profiler
events dumped: the device events by activity type, the CPU ops carrying the most device time with the events
linked to them (names, types, durations, streams, start/end against the step's window), correlation-id collisions
between CPU events, the per-stream union of device intervals against the wall time, and a Chrome trace.

    python benchmarks/gpu_jobs/model_profile_probe.py OUT [--compile] [--layers 4] [--seq 8192]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from solkit.model.device_events import device_work, is_runtime
from solkit.model.scope import module_scopes
from solkit.model.step import make_optimizer, real_step
from solkit.zoo import build

ATTRS = ("linked_correlation_id", "activity_type", "is_user_annotation", "device_resource_id", "external_id")


def union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -1e30
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def dump(events, wall_s: float, label: str) -> dict:
    dev = [e for e in events if getattr(e, "device_type", None) is not None and e.device_type.name == "CUDA"]
    dev_ids = {id(e) for e in dev}
    cpu = [e for e in events if id(e) not in dev_ids]
    t0 = min(e.time_range.start for e in cpu)
    t1 = max(e.time_range.end for e in cpu)
    by_type = collections.defaultdict(
        lambda: {"n": 0, "us": 0.0, "outside_cpu_window": 0, "names": collections.Counter()}
    )
    for e in dev:
        k = f"{getattr(e, 'activity_type', None)}|annotation={getattr(e, 'is_user_annotation', None)}"
        g = by_type[k]
        g["n"] += 1
        g["us"] += e.time_range.elapsed_us()
        g["outside_cpu_window"] += int(e.time_range.start < t0 or e.time_range.end > t1)
        g["names"][e.name[:60]] += 1
    for g in by_type.values():
        g["names"] = g["names"].most_common(6)
    streams = collections.defaultdict(list)
    for e in dev:
        if not getattr(e, "is_user_annotation", False):
            streams[getattr(e, "device_resource_id", 0)].append((e.time_range.start, e.time_range.end))
    ids = collections.Counter(e.id for e in cpu)
    by_corr = collections.defaultdict(list)
    for e in dev:
        by_corr[getattr(e, "linked_correlation_id", -1)].append(e)
    carriers = sorted((e for e in cpu if e.kernels), key=lambda e: -sum(k.duration for k in e.kernels))[:12]
    top = []
    for e in carriers:
        ks = sorted(e.kernels, key=lambda k: -k.duration)
        linked = by_corr.get(e.id, [])
        top.append({
            "name": e.name, "id": e.id, "thread": e.thread, "kernels": len(e.kernels),
            "kernel_us": sum(k.duration for k in e.kernels), "cpu_span_us": e.time_range.elapsed_us(),
            "cpu_events_with_this_id": ids[e.id],
            "top_kernels": [(k.name[:70], k.duration) for k in ks[:8]],
            "linked_device_events": [{"name": d.name[:70], "type": getattr(d, "activity_type", None),
                                      "annotation": getattr(d, "is_user_annotation", None),
                                      "us": d.time_range.elapsed_us(), "start_rel_us": d.time_range.start - t0,
                                      "end_rel_us": d.time_range.end - t0,
                                      "stream": getattr(d, "device_resource_id", None)}
                                     for d in sorted(linked, key=lambda d: -d.time_range.elapsed_us())[:10]],
        })  # fmt: skip
    kernel_sum = sum(k.duration for e in cpu for k in e.kernels)
    runtime = [e for e in cpu if e.kernels and is_runtime(e)]  # CUDA runtime calls carrying kernel lists (id clash?)
    runtime_ms = sum(k.duration for e in runtime for k in e.kernels) / 1e3
    parents = collections.Counter(getattr(e.cpu_parent, "name", None) for e in runtime).most_common(5)
    print(f"   runtime calls carrying kernels: {len(runtime)}, {runtime_ms:.1f} ms; their parents: {parents}")
    out = {
        "label": label, "wall_ms": wall_s * 1e3, "cpu_window_ms": (t1 - t0) / 1e3, "events": len(events),
        "device_events": len(dev), "sum_of_cpu_kernel_lists_ms": kernel_sum / 1e3,
        "device_by_type": dict(by_type),
        "per_stream_union_ms": {str(s): union_us(v) / 1e3 for s, v in streams.items()},
        "per_stream_sum_ms": {str(s): sum(b - a for a, b in v) / 1e3 for s, v in streams.items()},
        "cpu_id_collisions": sum(1 for c in ids.values() if c > 1),
        "top_carriers": top,
    }  # fmt: skip
    dw = device_work(events, wall_s)  # what solkit.model now counts
    out["solkit_device_work"] = {"total_ms": dw.total_us / 1e3, "unlinked_ms": dw.unlinked_us / 1e3, **dw.stats()}
    print(f"   solkit counts {dw.total_us / 1e3:.1f} ms of device work: {out['solkit_device_work']}")
    print(f"== {label}: wall {out['wall_ms']:.1f} ms, CPU window {out['cpu_window_ms']:.1f} ms, sum of CPU ops' "
          f"kernel lists {out['sum_of_cpu_kernel_lists_ms']:.1f} ms, per-stream union {out['per_stream_union_ms']}, "
          f"per-stream sum {out['per_stream_sum_ms']}, CPU id collisions {out['cpu_id_collisions']}")  # fmt: skip
    for k, g in by_type.items():
        where = f"outside CPU window {g['outside_cpu_window']}"
        print(f"   device {k}: n={g['n']} {g['us'] / 1e3:.1f} ms, {where}, {g['names'][:3]}")
    for t in top[:5]:
        head = f"   carrier {t['name'][:50]} id={t['id']} thread={t['thread']} kernels={t['kernels']}"
        share = f"{t['cpu_events_with_this_id']} CPU events share the id"
        print(f"{head} {t['kernel_us'] / 1e3:.1f} ms (cpu span {t['cpu_span_us'] / 1e3:.2f} ms, {share})")
        for name, us in t["top_kernels"][:4]:
            print(f"      {us / 1e3:9.3f} ms  {name}")
        for d in t["linked_device_events"][:4]:
            print(f"      linked {d}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8192)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    built = build("llama", layers=a.layers, seq=a.seq, batch=1, dtype=torch.bfloat16, device=dev, preset="llama3-8b")
    opt = make_optimizer([p for p in built.model.parameters() if p.requires_grad], "default")
    runner = torch.compile(built.model) if a.compile else None
    step = real_step(built, "train_step", runner, opt)
    import torch._inductor.config as ic

    patch = ic.patch(benchmark_kernel=True) if a.compile else contextlib.nullcontext()
    fe = torch.autograd.profiler_util.FunctionEvent
    print("torch", torch.__version__, "FunctionEvent attrs:", {x: x in fe.__init__.__code__.co_varnames for x in ATTRS})
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "compile": a.compile, "runs": []}
    with patch:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        variants = [("solkit_scopes", True)] if a.compile else [("solkit_scopes", True), ("no_module_scopes", False)]
        for label, scopes in variants:
            ctx = module_scopes(built.model) if scopes and not a.compile else contextlib.nullcontext()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof, ctx:
                t = time.perf_counter()
                step()
                torch.cuda.synchronize()
                wall = time.perf_counter() - t
            res["runs"].append(dump(list(prof.events()), wall, label + ("_compiled" if a.compile else "")))
            if label == "solkit_scopes":
                trace = out / f"trace{'_compiled' if a.compile else ''}.json"
                prof.export_chrome_trace(str(trace))
                with open(trace, "rb") as f, gzip.open(str(trace) + ".gz", "wb") as g:
                    shutil.copyfileobj(f, g)
                trace.unlink()
    name = "probe_compiled.json" if a.compile else "probe_eager.json"
    (out / name).write_text(json.dumps(res, indent=1, default=str))
    print("wrote", out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
