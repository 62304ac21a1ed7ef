#!/usr/bin/env python3
"""Power and clock diagnosis of the o_proj + residual GEMM (issue 6): is the residual's cost the power cap?

For each prefill shape, each variant runs as a sustained loop of back-to-back launches (CUDA graphs of
``--calls-per-graph`` calls, inputs rotating over 2 sets, no L2 flush): first ``--warm-s`` seconds
untimed, so clocks and power settle, then ``--seconds`` of the same graph replayed between two CUDA
events. A thread samples NVML every ``--sample-ms`` (SM and memory clocks, power, the clock-event
("throttle") reasons, temperature, the energy counter) and tags every sample with the phase running.
Per variant: time per call, mean SM clock, mean power (NVML's reading, and the energy counter's
slope), energy per call, the fraction of samples with the SW power cap reason, and the clock-normalised
time (time per call x mean SM clock = kilo-cycles per call). If the fused kernel's cycles per call
match the kernel without the residual while its clock is lower, the residual's cost is the power cap;
if its cycles are higher too, it is the kernel.

Variants: cuBLAS matmul, cuBLAS addmm (beta = 1), solkit fused, solkit without the residual (same
config), cuBLAS matmul followed by a separate read of the residual (torch.sum), and that read alone.
Clocks and power limits are only read, never changed.

    python lab/benchmarks/gemm_power.py --out $OUT/gemm_power.json [--seconds 1.0] [--shapes 4096x4096x4096]
    python lab/benchmarks/gemm_power.py --quick --out /tmp/p.json   # CPU smoke run (interpreter, no NVML)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if "--quick" in sys.argv and not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from _budgeted_run import versions  # noqa: E402  (benchmarks/ is the script's directory)

from solkit.kernels.gemm import dispatch as G  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 4096, 4096), (8192, 8192, 8192)]  # (M, N, K)
QUICK_SHAPES = [(96, 64, 64)]
VARIANTS = (
    "cuBLAS mm",
    "cuBLAS addmm",
    "solkit fused",
    "solkit no residual",
    "mm + residual read",
    "residual read",
    "solkit fused (broadcast residual)",
)
#: the residual every row reads is row 0 (stride 0): the same bytes through L2 into the SMs, but no DRAM
#: traffic for it (diagnosis: the residual's L2/DRAM side against its SM side)
BCAST = " (broadcast residual)"
#: NVML clock-event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*)
REASONS = {
    "gpu_idle": 0x1, "app_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sync_boost": 0x10,
    "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
}  # fmt: skip


def default_config() -> dict[str, Any]:
    """The prefill autotune list's first entry (the config the fused and no-residual rows run by default)."""
    cfg = G.load_config_table()["hopper"]["prefill"]["autotune"][0]
    return {"kernel": "tma_persistent", **{k: v for k, v in cfg.items() if k not in ("m_min", "m_max")}}


# ------------------------------------------------------------------------------------------- NVML sampling
class Sampler(threading.Thread):
    """NVML samples every ``period_s``: (host time, phase, SM MHz, memory MHz, power W, reasons, temp, energy mJ).

    Every query is guarded on its own: one the driver does not support is dropped, the others go on.
    Without NVML (no GPU, no pynvml) ``available`` is False and no samples are taken.
    """

    def __init__(self, device: torch.device, period_s: float) -> None:
        super().__init__(daemon=True)
        self.period_s = period_s
        self.samples: list[dict[str, Any]] = []
        self.phase: tuple[str, str] | None = None
        self.available = False
        self.note = ""
        self._stop = threading.Event()
        self.queries: dict[str, Any] = {}
        if device.type != "cuda":
            self.note = "no CUDA device"
            return
        try:
            import pynvml as nv

            nv.nvmlInit()
            index = device.index or 0
            # NVML numbers devices its own way (CUDA_VISIBLE_DEVICES); torch knows the mapping
            with contextlib.suppress(Exception):
                index = torch.cuda._get_nvml_device_index(device)
            h = nv.nvmlDeviceGetHandleByIndex(index)
            reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            reasons = reasons or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            self.queries = {
                "sm_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "reasons": lambda: int(reasons(h)),
                "temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "energy_mj": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
            }
            self.static: dict[str, Any] = {}
            for key, fn in (
                ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                ("max_sm_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
                ("driver", lambda: nv.nvmlSystemGetDriverVersion()),
            ):
                try:
                    v = fn()
                    self.static[key] = v.decode() if isinstance(v, bytes) else v
                except Exception as e:  # noqa: BLE001
                    self.static[key] = f"unavailable: {type(e).__name__}"
            for key, fn in list(self.queries.items()):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - not supported on this device/driver
                    del self.queries[key]
            self.available = "sm_mhz" in self.queries
            self.note = f"nvml, queries {sorted(self.queries)}"
        except Exception as e:  # noqa: BLE001 - no NVML: the timings still stand
            self.note = f"nvml unavailable: {type(e).__name__}: {e}"

    def run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            s: dict[str, Any] = {"t": t0, "phase": self.phase}
            for key, fn in self.queries.items():
                with contextlib.suppress(Exception):  # a failed read is a missing field, not a crash
                    s[key] = fn()
            self.samples.append(s)
            self._stop.wait(max(0.0, self.period_s - (time.perf_counter() - t0)))

    def stop(self) -> None:
        self._stop.set()

    def window(self, t0: float, t1: float, phase: tuple[str, str]) -> list[dict[str, Any]]:
        return [s for s in self.samples if t0 <= s["t"] <= t1 and s["phase"] == phase]


def summarise(samples: list[dict[str, Any]], per_call_ms: float | None) -> dict[str, Any]:
    """Means of a window's samples, the reason fractions and the clock-normalised time."""
    out: dict[str, Any] = {"samples": len(samples)}
    if not samples:
        return out
    for key in ("sm_mhz", "mem_mhz", "power_w", "temp_c"):
        vals = [s[key] for s in samples if key in s]
        if vals:
            out[f"{key}_mean"] = statistics.fmean(vals)
            out[f"{key}_min"] = min(vals)
            out[f"{key}_max"] = max(vals)
    reasons = [s["reasons"] for s in samples if "reasons" in s]
    if reasons:
        n = len(reasons)
        out["reason_fraction"] = {name: sum(1 for r in reasons if r & bit) / n for name, bit in REASONS.items()}
    energy = [(s["t"], s["energy_mj"]) for s in samples if "energy_mj" in s]
    if len(energy) >= 2 and energy[-1][0] > energy[0][0]:
        # the energy counter's slope: the mean power over the window (NVML's power reading is averaged)
        out["power_from_energy_w"] = (energy[-1][1] - energy[0][1]) * 1e-3 / (energy[-1][0] - energy[0][0])
    if per_call_ms is not None and "sm_mhz_mean" in out:
        out["kcycles_per_call"] = per_call_ms * out["sm_mhz_mean"]  # ms x MHz = 1e3 cycles
    power = out.get("power_from_energy_w", out.get("power_w_mean"))
    if per_call_ms is not None and power is not None:
        out["mj_per_call"] = power * per_call_ms  # W x ms = mJ
    return out


# ------------------------------------------------------------------------------------------- the loop
def wait_for(event: Any) -> None:
    """Poll instead of synchronize, so the sampler thread always gets the interpreter."""
    while not event.query():
        time.sleep(0.0005)


def sustained(fn, pool, seconds: float, warm_s: float, calls: int, sampler: Sampler, name: str) -> dict[str, Any]:
    """Warm for ``warm_s``, then time ``seconds`` of back-to-back calls; returns time per call and the window."""
    if not torch.cuda.is_available():  # CPU smoke run: wall clock over a few calls
        t0 = time.perf_counter()
        n = 0
        while n < 2 or time.perf_counter() - t0 < min(seconds, 0.05):
            fn(*pool[n % len(pool)])
            n += 1
        return {"per_call_ms": (time.perf_counter() - t0) / n * 1e3, "calls": n, "timer": "wall (cpu)"}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(*pool[i % len(pool)])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(*pool[i % len(pool)])
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    per_graph_s = (time.perf_counter() - t0) / 3
    warm_reps = max(1, round(warm_s / per_graph_s))
    reps = max(3, round(seconds / per_graph_s))
    done = torch.cuda.Event()
    sampler.phase = (name, "warm")
    for _ in range(warm_reps):
        graph.replay()
    done.record()
    wait_for(done)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampler.phase = (name, "timed")
    h0 = time.perf_counter()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    wait_for(end)
    h1 = time.perf_counter()
    sampler.phase = None
    total_ms = start.elapsed_time(end)
    del graph
    return {
        "per_call_ms": total_ms / (reps * calls),
        "calls": reps * calls,
        "timed_s": total_ms * 1e-3,
        "warm_s": warm_reps * per_graph_s,
        "calls_per_graph": calls,
        "timer": "CUDA events around the replays of one CUDA graph (back-to-back calls, no L2 flush)",
        "host_window": [h0, h1],
    }


def variant_fns(cfg: dict[str, Any] | None) -> dict[str, Any]:
    def read(r):  # a separate kernel reading the residual once (one value written)
        return r.sum()

    return {
        "cuBLAS mm": lambda x, w, r: torch.matmul(x, w.t()),
        "cuBLAS addmm": lambda x, w, r: torch.addmm(r, x, w.t()),
        "solkit fused": lambda x, w, r: G.gemm(x, w, residual=r, config=cfg),
        "solkit no residual": lambda x, w, r: G.gemm(x, w, config=cfg),
        "mm + residual read": lambda x, w, r: (torch.matmul(x, w.t()), read(r)),
        "residual read": lambda x, w, r: read(r),
        "solkit fused" + BCAST: lambda x, w, r: G.gemm(x, w, residual=r[:1].expand_as(r), config=cfg),
    }


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="benchmarks/results/gemm_power.json")
    p.add_argument("--shapes", default="", help="MxNxK,... (default: the four prefill shapes of issue 6)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    p.add_argument("--extra", action="append", default=[], metavar="NAME=JSON",
                   help="another solkit fused config to run as variant NAME (a gemm/configs.yaml entry)")  # fmt: skip
    p.add_argument("--config", help="the fused / no-residual rows' config as JSON (default: autotune entry 0)")
    p.add_argument("--bcast-extras", action="store_true", help="each --extra also with the broadcast residual")
    p.add_argument("--seconds", type=float, default=1.0, help="timed seconds per variant")
    p.add_argument("--warm-s", type=float, default=0.3, help="untimed seconds before, same loop")
    p.add_argument("--sample-ms", type=float, default=5.0)
    p.add_argument("--calls-per-graph", type=int, default=20)
    p.add_argument("--budget-s", type=float, default=1e9, help="skip what would start after this many seconds")
    p.add_argument("--quick", action="store_true", help="tiny shapes on the CPU (interpreter), no NVML")
    p.add_argument("--render", metavar="JSON", help="print a result file as a markdown table and exit")
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    t_start = time.time()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float16
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s] or (
        QUICK_SHAPES if args.quick else SHAPES
    )
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    extras = {}
    for item in args.extra:
        name, _, text = item.partition("=")
        extras[name] = {"kernel": "tma_persistent", **json.loads(text)}
        if args.bcast_extras:
            extras[name + BCAST] = extras[name]
    sys.setswitchinterval(0.0005)  # the sampler thread wakes on time even while the main thread enqueues
    sampler = Sampler(device, args.sample_ms * 1e-3)
    doc: dict[str, Any] = {
        "benchmark": "gemm_power",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu (Triton interpreter)",
        "versions": versions(),
        "dtype": str(dtype).replace("torch.", ""),
        "protocol": "per variant: a CUDA graph of calls_per_graph back-to-back calls (inputs rotating over 2 "
        "sets, no L2 flush) replayed for warm_s untimed, then for `seconds` between two CUDA events; NVML "
        "sampled every sample_ms by a thread, samples tagged with the phase running; only the timed "
        "window's samples are summarised. kcycles_per_call = per_call_ms x mean SM MHz (clock-normalised "
        "time). Clocks and power limits were only read. Not the table-of-record protocol (that one flushes "
        "L2 before every call).",
        "settings": {
            "seconds": args.seconds,
            "warm_s": args.warm_s,
            "sample_ms": args.sample_ms,
            "calls_per_graph": args.calls_per_graph,
        },  # fmt: skip
        "nvml": {"note": sampler.note, **getattr(sampler, "static", {})},
        "rows": [],
    }
    out = Path(args.out)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".tmp").write_text(json.dumps(doc, indent=1, default=str))
        out.with_suffix(".tmp").replace(out)

    if sampler.available:
        sampler.start()
        time.sleep(0.1)
        doc["idle"] = summarise(sampler.samples, None)
    for si, (M, N, K) in enumerate(shapes):
        cfg = (
            ({"kernel": "tma_persistent", **json.loads(args.config)} if args.config else default_config())
            if cuda
            else None
        )
        gen = torch.Generator(device=device).manual_seed(M * 31 + N * 7 + K)
        w = torch.randn(N, K, device=device, dtype=dtype, generator=gen) / K**0.5
        pool = [(torch.randn(M, K, device=device, dtype=dtype, generator=gen),
                 w, torch.randn(M, N, device=device, dtype=dtype, generator=gen)) for _ in range(2)]  # fmt: skip
        x, _, r = pool[0]
        ref_mm = x.float() @ w.float().t()
        ref = ref_mm + r.float()
        ref_bcast = ref_mm + r[:1].float()
        allowed = 2 * rel_err(torch.addmm(r, x, w.t()), ref) + 1e-3
        fns = {k: v for k, v in variant_fns(cfg).items() if k in variants}
        for name, ecfg in extras.items():
            if name.endswith(BCAST):
                fns[name] = lambda x, w, r, ecfg=ecfg: G.gemm(x, w, residual=r[:1].expand_as(r), config=ecfg)
            else:
                fns[name] = lambda x, w, r, ecfg=ecfg: G.gemm(x, w, residual=r, config=ecfg)
        order = list(fns) if si % 2 == 0 else list(fns)[::-1]  # reversed every other shape: no fixed position
        for name in order:
            if time.time() - t_start > args.budget_s:
                doc.setdefault("skipped", []).append({"shape": [M, N, K], "variant": name, "why": "time budget"})
                continue
            row: dict[str, Any] = {"M": M, "N": N, "K": K, "variant": name}
            if name in extras:
                row["config"] = extras[name]
            elif name.startswith("solkit"):
                row["config"] = cfg
            try:
                y = fns[name](*pool[0])
                y = y[0] if isinstance(y, tuple) else y
                if name != "residual read":  # a check of every GEMM's output against the fp32 reference
                    plain = name in ("cuBLAS mm", "solkit no residual", "mm + residual read")
                    err = rel_err(y, ref_mm if plain else ref_bcast if name.endswith(BCAST) else ref)
                    row.update(rel_err=err, correct=bool(torch.isfinite(y).all()) and err <= allowed)
                name_tag = name
                res = sustained(fns[name], pool, args.seconds, args.warm_s, args.calls_per_graph, sampler, name_tag)
                row.update({k: v for k, v in res.items() if k != "host_window"})
                if sampler.available and "host_window" in res:
                    h0, h1 = res["host_window"]
                    row["nvml"] = summarise(sampler.window(h0, h1, (name_tag, "timed")), res["per_call_ms"])
            except Exception as e:  # noqa: BLE001 - a failing variant is a row with its error; the others go on
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            doc["rows"].append(row)
            nv = row.get("nvml", {})
            print(f"[{time.time() - t_start:6.1f}s] {M}x{N}x{K} {name:20s} "
                  f"{row.get('per_call_ms', float('nan')) * 1e3:9.1f} us  SM {nv.get('sm_mhz_mean', 0):6.0f} MHz  "
                  f"{nv.get('power_from_energy_w', nv.get('power_w_mean', 0)):5.0f} W  "
                  f"cap {nv.get('reason_fraction', {}).get('sw_power_cap', float('nan')):.2f}  "
                  f"kcyc {nv.get('kcycles_per_call', float('nan')):8.1f}  n={nv.get('samples', 0)} "
                  f"{row.get('error', '')[:80]}", flush=True)  # fmt: skip
            save()
        del pool, x, r, w, ref, ref_mm, ref_bcast
        if cuda:
            torch.cuda.empty_cache()
    sampler.stop()
    doc["comparisons"] = compare(doc["rows"])
    doc["wall_s"] = time.time() - t_start
    save()
    for c in doc["comparisons"]:
        print(json.dumps(c))
    return 0


def render(path: str) -> str:
    """A result file as a markdown table: one row per (shape, variant)."""
    doc = json.loads(Path(path).read_text())
    lines = [
        "| shape | variant | µs per call | SM MHz | W (energy slope) | mJ per call | SW power cap | kcycles per call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        nv = r.get("nvml", {})
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "per_call_ms" not in r:
            lines.append(f"| {shape} | {r['variant']} | {r.get('error', '?')[:60]} | | | | | |")
            continue
        cap = nv.get("reason_fraction", {}).get("sw_power_cap")
        power = nv.get("power_from_energy_w", nv.get("power_w_mean"))
        cells = [
            f"{r['per_call_ms'] * 1e3:.1f}",
            f"{nv['sm_mhz_mean']:.0f}" if "sm_mhz_mean" in nv else "-",
            f"{power:.0f}" if power is not None else "-",
            f"{nv['mj_per_call']:.1f}" if "mj_per_call" in nv else "-",
            f"{cap:.2f}" if cap is not None else "-",
            f"{nv['kcycles_per_call']:.1f}" if "kcycles_per_call" in nv else "-",
        ]
        lines.append(f"| {shape} | {r['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shape: the fused kernel against itself without the residual and against cuBLAS, in time, cycles, power."""
    out = []
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows})
    for shape in shapes:
        by = {r["variant"]: r for r in rows if (r["M"], r["N"], r["K"]) == shape and "per_call_ms" in r}
        item: dict[str, Any] = {"shape": "x".join(map(str, shape))}
        for a, b in (("solkit fused", "solkit no residual"), ("solkit fused", "cuBLAS mm"),
                     ("solkit fused" + BCAST, "solkit no residual"), ("solkit fused", "solkit fused" + BCAST),
                     ("cuBLAS addmm", "cuBLAS mm"), ("mm + residual read", "cuBLAS mm"),
                     ("solkit no residual", "cuBLAS mm")):  # fmt: skip
            if a in by and b in by:
                ra, rb = by[a], by[b]
                key = f"{a} / {b}"
                item[key] = {"time": ra["per_call_ms"] / rb["per_call_ms"]}
                na, nb = ra.get("nvml", {}), rb.get("nvml", {})
                if "kcycles_per_call" in na and "kcycles_per_call" in nb:
                    item[key]["cycles"] = na["kcycles_per_call"] / nb["kcycles_per_call"]
                    item[key]["sm_clock"] = na["sm_mhz_mean"] / nb["sm_mhz_mean"]
                if "mj_per_call" in na and "mj_per_call" in nb:
                    item[key]["energy"] = na["mj_per_call"] / nb["mj_per_call"]
        out.append(item)
    return out


if __name__ == "__main__":
    sys.exit(main())
