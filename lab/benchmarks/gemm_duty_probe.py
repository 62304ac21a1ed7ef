"""Do the Llama step's backward GEMMs run slower than alone because of the power state around them? (issue 21, lab)

gemm_step_probe found the decoder layers' backward GEMMs 7-10 % slower inside the step than alone on the same
operands (same kernels, same data, same addresses), while the forward GEMMs and the LM head's agree within 1.3 %.
The alone timing idled the GPU for one GEMM duration before each call (a GEMM duty of 0.5). The backward pass is
denser in GEMMs than the forward, so the power it draws around each GEMM is higher. This probe:

1. profiles the step (as gemm_step_probe does) and gives every mm call its **local duty**: the GEMM kernel time
   within +-WINDOW ms of the call over the window's length, and its local busy share (all kernels);
2. times each distinct operand layout alone at idle-gap duties 0.5, 0.7, 0.85 and 1.0 (back to back), and at duty
   0.5 with the gap filled by a memory-bound copy (the step's elementwise work draws power too), with the L2 flushed
   before each call.
If the slow-down follows the local duty (or the filled gap), the step's GEMMs run in a power state the bench's
burst timing (one duty for the whole step, idle gaps) does not reproduce.

    python3 lab/benchmarks/gemm_duty_probe.py OUT_JSON [--layers 2] [--window-ms 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gemm_step_probe import Spy  # noqa: E402  (the lab's own probe: the same dispatch spy)

GEMM_NAMES = ("nvjet", "gemm", "sm90_xmma")


def is_gemm(name: str) -> bool:
    """cuBLAS's GEMM kernels; not the attention kernels, whose template arguments name cutlass types."""
    return any(k in name for k in GEMM_NAMES) and "flash" not in name.lower()


def warm_llama(layers: int):
    """HF Llama at Llama-3-8B shapes, 8192 tokens, bf16, after two forward + backward steps."""
    from solkit.zoo import hf

    built = hf.build("llama", preset="llama3-8b", layers=layers, seq=8192, batch=1, dtype=torch.bfloat16,
                     device="cuda")  # fmt: skip
    for _ in range(2):
        built.call().loss.backward()
        built.model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return built


def gpu_kernels(prof) -> list[tuple[float, float, str]]:
    """(start, end, name) of every kernel in the profile, memsets left out, in start order."""
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                  if e.device_type.name == "CUDA" and "memset" not in e.name.lower())  # fmt: skip


def step_duties(layers: int, window_ms: float) -> tuple[list[dict], dict]:
    built = warm_llama(layers)
    spy = Spy()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof, spy:
        built.call().loss.backward()
        torch.cuda.synchronize()
    kernels = gpu_kernels(prof)
    gemms = [k for k in kernels if is_gemm(k[2])]
    w = window_ms * 1e3
    rows = []
    for i, (s, e, name) in enumerate(gemms):
        lo, hi = s - w, e + w
        span = max(min(hi, kernels[-1][1]) - max(lo, kernels[0][0]), 1e-9)
        g = sum(max(0.0, min(ke, hi) - max(ks, lo)) for ks, ke, kn in gemms)
        busy = sum(max(0.0, min(ke, hi) - max(ks, lo)) for ks, ke, kn in kernels)
        info = spy.calls[i] if i < len(spy.calls) else {}
        rows.append({"key": info.get("key", "?"), "us": e - s, "kernel": name[:80],
                     "start_ms": (s - kernels[0][0]) / 1e3, "local_gemm_duty": g / span,
                     "local_busy": busy / span})  # fmt: skip
    return rows, spy.kept


@torch.no_grad()
def time_at(a, b, reps: int, gap_ms: float, filler: tuple[torch.Tensor, torch.Tensor] | None) -> float:
    a, b = a.detach(), b.detach()
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    out = torch.mm(a, b)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps + 3):
        flush.zero_()
        if gap_ms > 0:
            if filler is None:
                torch.cuda._sleep(int(gap_ms * 1.9e6))
            else:
                src, dst = filler
                n = min(int(gap_ms * 1e-3 * 4.0e12 / 2), src.numel())  # bytes the copy moves in about gap_ms
                dst[:n].copy_(src[:n])
        if r >= 3:
            starts[r - 3].record()
        torch.mm(a, b, out=out)
        if r >= 3:
            ends[r - 3].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--window-ms", type=float, default=10.0)
    args = ap.parse_args(argv)
    t0 = time.time()
    rows, kept = step_duties(args.layers, args.window_ms)
    print(f"{len(rows)} GEMM kernels in the step (matched to mm calls in order), {len(kept)} distinct mm layouts",
          flush=True)  # fmt: skip
    src = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    alone = {}
    for key, (a, b) in kept.items():
        mine = [r for r in rows if r["key"] == key]
        if not mine:
            continue
        step_us = statistics.median(r["us"] for r in mine)
        res = {"step_us": step_us, "calls": len(mine),
               "local_gemm_duty": statistics.median(r["local_gemm_duty"] for r in mine),
               "local_busy": statistics.median(r["local_busy"] for r in mine)}  # fmt: skip
        for d in (0.5, 0.7, 0.85, 1.0):
            res[f"idle_duty_{d}"] = time_at(a, b, args.reps, step_us / 1e3 * (1 - d) / d, None)
        res["filled_duty_0.5"] = time_at(a, b, args.reps, step_us / 1e3, (src, dst))
        alone[key] = res
        cols = " ".join(f"{k.split('_')[-1] if 'idle' in k else 'fill0.5'} {v / step_us:.3f}" for k, v in res.items()
                        if k.startswith(("idle", "filled")))  # fmt: skip
        print(f"{key[:58]:58} step {step_us:7.1f} us x{len(mine)} local duty {res['local_gemm_duty']:.2f} busy "
              f"{res['local_busy']:.2f} | alone/step at duty: {cols}", flush=True)  # fmt: skip
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": args.layers,
            "window_ms": args.window_ms, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.time() - t0, 1),
            "command": "python3 lab/benchmarks/gemm_duty_probe.py " + " ".join(argv)}  # fmt: skip
    Path(args.out).write_text(json.dumps({"meta": meta, "step_gemms": rows, "alone": alone}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
