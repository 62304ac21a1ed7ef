"""Which SM clock do the Llama step's GEMMs run at, inside the step and alone? (issue 21, lab)

gemm_duty_probe left the short backward GEMMs (the attention projections, 0.1-0.4 ms) 9-13 % slower inside the step
than alone at every idle duty, back to back and behind a memory-bound filler, while the long backward GEMMs reach
their step time back to back. Two explanations are left:

* **the clock the neighbours set.** The backward pass runs the MLP's 1.3 ms GEMMs at the 700 W cap around the short
  ones; the power controller acts over milliseconds, so a short GEMM right after them inherits a lowered SM clock
  that it would not cause itself. A copy draws too little power to reproduce that, and so does the GEMM alone.
* **the span a busy stream gives a short kernel** (launched while its predecessor drains).

A spin kernel of a fixed number of SM cycles (``torch.cuda._sleep``) measures the SM clock where it runs: its
duration is cycles / f_SM. This probe puts one right before every mm of the step (a dispatch mode) and reads both
durations from the profile, then times each layout alone behind the same spin, after an idle gap, back to back, and
right after three calls of the step's largest GEMM. If the in-step clock is lower by the in-step slow-down and the GEMM
behind a heavy GEMM reproduces both, the neighbours' power sets it; if the clocks agree, it is the stream.

    python3 lab/benchmarks/gemm_clock_probe.py OUT_JSON [--layers 2] [--reps 20] [--cycles 40000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))
from gemm_duty_probe import gpu_kernels, is_gemm, warm_llama  # noqa: E402  (the lab's own probe: the same step)

MM = torch.ops.aten.mm.default


class ClockSpy(TorchDispatchMode):
    """A spin of ``cycles`` SM cycles before every mm; records each mm's operand layout, keeps one pair per layout."""

    def __init__(self, cycles: int) -> None:
        super().__init__()
        self.cycles, self.keys = cycles, []
        self.kept: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is MM:
            a, b = args[0], args[1]
            key = f"{list(a.shape)}x{list(b.shape)} {list(a.stride())}/{list(b.stride())}"
            self.keys.append(key)
            self.kept.setdefault(key, (a.detach(), b.detach()))
            torch.cuda._sleep(self.cycles)
        return func(*args, **(kwargs or {}))


def step_clocks(layers: int, cycles: int) -> tuple[list[dict], dict]:
    built = warm_llama(layers)
    spy = ClockSpy(cycles)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof, spy:
        built.call().loss.backward()
        torch.cuda.synchronize()
    kernels = gpu_kernels(prof)
    rows, spin = [], None
    for s, e, name in kernels:
        if "spin" in name.lower():
            spin = (s, e)
        elif is_gemm(name) and spin is not None:
            rows.append({"us": e - s, "clock_mhz": cycles / (spin[1] - spin[0]), "gap_us": s - spin[1],
                         "start_ms": (s - kernels[0][0]) / 1e3})  # fmt: skip
            spin = None
    if len(rows) != len(spy.keys):  # a call whose kernel is not a named GEMM would shift the pairing after it
        print(f"warning: {len(rows)} GEMM kernels for {len(spy.keys)} mm calls", flush=True)
    for row, key in zip(rows, spy.keys):
        row["key"] = key
    return rows, spy.kept


@torch.no_grad()
def time_alone(a, b, reps: int, cycles: int, before: str, heavy: tuple[torch.Tensor, torch.Tensor], gap_ms: float):
    """Median GEMM time and SM clock (the spin right before it) with ``before`` ahead of each call: ``idle`` (a spin
    of gap_ms), ``b2b`` (nothing), ``heavy`` (three calls of the step's largest GEMM)."""
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    out = torch.mm(a, b)
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(reps)]
    heavy_out = torch.mm(*heavy)
    for r in range(reps + 3):
        flush.zero_()
        if before == "idle":
            torch.cuda._sleep(int(gap_ms * 1.9e6))
        elif before == "heavy":
            for _ in range(3):
                torch.mm(*heavy, out=heavy_out)
        if r >= 3:
            ev[r - 3][0].record()
        torch.cuda._sleep(cycles)
        if r >= 3:
            ev[r - 3][1].record()
        torch.mm(a, b, out=out)
        if r >= 3:
            ev[r - 3][2].record()
    torch.cuda.synchronize()
    us = statistics.median(e[1].elapsed_time(e[2]) * 1e3 for e in ev)
    mhz = statistics.median(cycles / (e[0].elapsed_time(e[1]) * 1e3) for e in ev)
    return {"us": us, "clock_mhz": mhz}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=40000)
    args = ap.parse_args(argv)
    t0 = time.time()
    rows, kept = step_clocks(args.layers, args.cycles)
    print(f"{len(rows)} GEMM kernels with a spin before them, {len(kept)} layouts", flush=True)
    step_us_of = {k: statistics.median(r["us"] for r in rows if r["key"] == k) for k in {r["key"] for r in rows}}
    heavy_key = max(step_us_of, key=step_us_of.get)
    heavy = kept[heavy_key]
    alone = {}
    for key, (a, b) in kept.items():
        mine = [r for r in rows if r["key"] == key]
        if not mine:
            continue
        step_us = statistics.median(r["us"] for r in mine)
        res = {"step_us": step_us, "step_clock_mhz": statistics.median(r["clock_mhz"] for r in mine),
               "calls": len(mine)}  # fmt: skip
        for before in ("idle", "b2b", "heavy"):
            res[before] = time_alone(a, b, args.reps, args.cycles, before, heavy, step_us / 1e3)
        alone[key] = res
        cols = " ".join(f"{k} {res[k]['us'] / step_us:.3f}@{res[k]['clock_mhz']:.0f}" for k in ("idle", "b2b", "heavy"))
        print(f"{key[:58]:58} step {step_us:7.1f} us @{res['step_clock_mhz']:.0f} MHz x{len(mine)} | alone/step@MHz: "
              f"{cols}", flush=True)  # fmt: skip
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": args.layers,
            "cycles": args.cycles, "heavy": heavy_key, "seconds": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "python3 lab/benchmarks/gemm_clock_probe.py " + " ".join(argv)}  # fmt: skip
    Path(args.out).write_text(json.dumps({"meta": meta, "step_gemms": rows, "alone": alone}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
