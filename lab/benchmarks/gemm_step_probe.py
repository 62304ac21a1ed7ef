"""Why do the decoder layers' backward GEMMs run slower inside a Llama train step than alone? (issue 21, lab probe)

`solkit model-check` found the layers' backward GEMMs 6-12 % slower in the step than the bench's burst timing of the
same shapes and layouts at the same sampled SM clock, while the forward GEMMs and the LM head's backward agree. This
probe separates the candidate causes on one GPU, in one process:

1. the step (HF LlamaForCausalLM, Llama-3-8B shapes, LAYERS layers, 8192 tokens, bf16, forward + backward) under
   torch.profiler: every ``aten::mm`` with its kernel name(s) and GPU time, and, from a dispatch mode, its operands'
   shapes, strides and data-pointer alignment; one layer's backward GEMM operands are kept;
2. the same call alone, three ways, each timed over REPS calls with the L2 flushed and a gap before each call:
   (a) on the step's own operand tensors (same data, same addresses), (b) on fresh random tensors of the same shapes
   and strides, (c) on (a)'s data copied to fresh storage;
   with their kernel names.
If (a) is as slow as in the step, the data or the addresses matter; if (a) is fast and the step is slow, the step's
context (what ran before: dirty L2 lines, the power state) does; a different kernel name says cuBLAS chose another
algorithm.

    python3 lab/benchmarks/gemm_step_probe.py OUT_JSON [--layers 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MM = torch.ops.aten.mm.default


class Spy(TorchDispatchMode):
    """Records every mm's operands (shape, stride, pointer alignment) in call order; keeps the chosen ones."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict] = []
        self.kept: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is MM:
            a, b = args[0], args[1]
            key = f"{list(a.shape)}x{list(b.shape)} {list(a.stride())}/{list(b.stride())}"
            self.calls.append({"key": key, "a_align": a.data_ptr() % 1024, "b_align": b.data_ptr() % 1024,
                               "out_align": out.data_ptr() % 1024})  # fmt: skip
            self.kept.setdefault(key, (a, b))
        return out


def kernels_of(prof) -> list[tuple[str, float]]:
    return [(e.name, e.device_time) for e in prof.events() if e.device_type.name == "CUDA" and "memset" not in e.name]


def step_profile(layers: int, device: str) -> tuple[list[dict], dict]:
    from solkit.zoo import hf

    gpu = device == "cuda"
    built = hf.build("llama", preset="llama3-8b" if gpu else "tiny", layers=layers, seq=8192 if gpu else 64, batch=1,
                     dtype=torch.bfloat16 if gpu else torch.float32, device=device)  # fmt: skip
    model = built.model
    for _ in range(2):  # warm-up: cuBLAS handles, allocator
        built.call().loss.backward()
        model.zero_grad(set_to_none=True)
    if gpu:
        torch.cuda.synchronize()
    spy = Spy()
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof, spy:
        built.call().loss.backward()
        if gpu:
            torch.cuda.synchronize()
    # the mode's redispatch nests a second aten::mm inside each call: the innermost one launches the kernels
    inner = (e for e in prof.events()
             if e.name == "aten::mm" and getattr(e.cpu_parent, "name", "") == "PythonDispatchMode")  # fmt: skip
    mm_ops = sorted(inner, key=lambda e: e.time_range.start)
    rows = []
    for i, e in enumerate(mm_ops):
        ks = [(k.name, k.duration) for k in e.kernels]  # FunctionEvent.kernels: Kernel(name, device, duration)
        info = spy.calls[i] if i < len(spy.calls) else {}
        shapes = [list(s) for s in e.input_shapes[:2]]
        matched = bool(info) and info["key"].startswith(f"{shapes[0]}x{shapes[1]}")
        rows.append({**info, "profiler_shapes": shapes, "order_matched": matched,
                     "kernels": [k[0][:90] for k in ks], "us": sum(k[1] for k in ks)})  # fmt: skip
    return rows, spy.kept


@torch.no_grad()
def time_alone(a: torch.Tensor, b: torch.Tensor, reps: int, gap_ms: float) -> dict:
    a, b = a.detach(), b.detach()  # the step's operands may require grad; mm(out=) refuses those
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    out = torch.mm(a, b)
    names: list[str] = []
    times = []
    for r in range(reps):
        flush.zero_()
        torch.cuda._sleep(int(gap_ms * 1.9e6))  # ~gap at ~1.9 GHz: the GPU idle as between the step's GEMMs
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.mm(a, b, out=out)
            torch.cuda.synchronize()
        ks = [(e.name, e.device_time) for e in prof.events() if e.device_type.name == "CUDA"]
        ks = [k for k in ks if "sleep" not in k[0] and "elementwise" not in k[0] and "fill" not in k[0]]
        if r == 0:
            names = [k[0][:90] for k in ks]
        times.append(sum(k[1] for k in ks))
    return {"us_median": statistics.median(times), "us_min": min(times), "kernels": names}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the step's bookkeeping on the tiny preset")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows, kept = step_profile(args.layers, args.device)
    matched = sum(r["order_matched"] for r in rows)
    print(
        f"{len(rows)} mm calls in the step, {len(kept)} distinct operand layouts, spy/profiler order matched "
        f"{matched}/{len(rows)}",
        flush=True,
    )
    if args.device != "cuda":
        return 0 if rows and matched == len(rows) else 1
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r.get("key", "?"), []).append(r)
    alone = {}
    for key, (a, b) in kept.items():
        step_us = statistics.median(r["us"] for r in by_key.get(key, []) if r["us"])
        gap = step_us / 1e3
        res = {"step_us_median": step_us, "step_kernels": sorted({k for r in by_key[key] for k in r["kernels"]}),
               "step_align": sorted({(r["a_align"], r["b_align"], r["out_align"]) for r in by_key[key]}),
               "calls_in_step": len(by_key[key]),
               "same_tensors": time_alone(a, b, args.reps, gap)}  # fmt: skip
        ca = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        cb = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=b.device).copy_(b)
        res["copied_data"] = time_alone(ca, cb, args.reps, gap)
        ra = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).normal_()
        rb = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=b.device).normal_()
        res["random_data"] = time_alone(ra, rb, args.reps, gap)
        res["a_absmean"], res["b_absmean"] = float(a.float().abs().mean()), float(b.float().abs().mean())
        res["a_zero_frac"], res["b_zero_frac"] = float((a == 0).float().mean()), float((b == 0).float().mean())
        del ca, cb, ra, rb
        alone[key] = res
        print(
            f"{key}: step {step_us:.1f} us x{len(by_key[key])} | same tensors {res['same_tensors']['us_median']:.1f}"
            f" | copied {res['copied_data']['us_median']:.1f} | random {res['random_data']['us_median']:.1f} | "
            f"|a| {res['a_absmean']:.3g} zeros {res['a_zero_frac']:.2f} | kernels step {res['step_kernels']} "
            f"alone {res['same_tensors']['kernels']} random {res['random_data']['kernels']}",
            flush=True,
        )
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": args.layers,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.time() - t0, 1),
            "command": "python3 lab/benchmarks/gemm_step_probe.py " + " ".join(argv)}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "step_mm": rows, "alone": alone}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
