#!/usr/bin/env python3
"""The read floor: the shortest kernel span in which anything on this GPU streams S bytes from HBM.

Issue 6's decode criterion at K = N = 4096 needs a 32 MiB weight stream in <= ~9.3 us (0.85 of the calibrated
4.23 TB/s); whether any kernel can do that depends on the card's fixed per-kernel cost (launch, block
dispatch, first-byte latency, ramp, drain), not only on its streaming rate. This times many ways of reading
S = 1 ... 512 MiB once and fits T = a + S / B per family (over S >= 8 MiB, and over 8-64 MiB). Families:
``chunk`` (one contiguous chunk per program, all loads in flight; .cg / evict_first), ``persist`` (grid-stride
or one slab per program, register double buffer), ``pipe`` (tl.range software pipeline, cp.async), ``tma``
(descriptor tile loads into shared memory), ``rows`` (the decode GEMV's access pattern), ``gemv`` (y = W x over
whole rows; persistent; without x), torch (``W.sum()``, ``torch.mv``, ``copy_``), solkit's decode GEMV, and
``empty`` (the launch alone). The Triton readers sum what they read into one int32 per program, and the sums
must add up to the buffer's (every word read once); the GEMVs are checked against fp32.

Timing: the kernel span per call from the CUDA profiler (the decode sweep's interleaved session, L2 read flush
before every call, outside the range); at 32 MiB also ``timing.benchmark(method="kernel")`` and
``method="graph_events"`` for the fastest families.

    python lab/benchmarks/read_floor.py --out $OUT/read_floor.json --budget-s 60
    python lab/benchmarks/read_floor.py --quick --out /tmp/rf.json     # CPU: the interpreter checks every family
    python lab/benchmarks/read_floor.py --render benchmarks/results/read_floor/2026-11-30_h200_1100.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if "--quick" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from _budgeted_run import BudgetedRun, run_workers, versions  # noqa: E402  (benchmarks/ is the script's directory)
from _read_kernels import _gemv_x, launch, triton_families  # noqa: E402

MIB = 2**20
SIZES_MIB = (1, 4, 8, 16, 32, 64, 128, 256, 512)
QUICK_SIZES_MIB = (1,)  # interpreter: the checks, not the speed


def check(spec: dict[str, Any], words: torch.Tensor, out: torch.Tensor) -> dict[str, Any]:
    """The programs' int32 partial sums must add up (mod 2^32) to the buffer's sum: every word read once.
    GEMV families: y against an fp32 reference (relative error, NaN-poisoned output)."""
    if spec["kind"].startswith("gemv"):
        out.view(torch.float32).fill_(float("nan"))
        n = launch(spec, words, out)
        w = words.view(torch.bfloat16).view(-1, 4096).float()
        ref = w.sum(dim=1) if spec.get("NO_X") else w @ _gemv_x(words.device).float()
        got = out.view(torch.float32)[:n]
        err = float(((got - ref).norm() / ref.norm()).item())
        return {"ok": bool(torch.isfinite(got).all().item()) and err < 1e-4, "programs": n, "rel_err": err}
    out.fill_(0x5A5A5A5A)  # poison: a program that stored nothing leaves this in
    grid = launch(spec, words, out)
    if spec["kind"] == "empty":  # reads nothing: each program stores its own index
        ok = bool((out[:grid].cpu() == torch.arange(grid, dtype=torch.int32)).all())
        return {"ok": ok, "programs": grid}
    got = int(out[:grid].to(torch.int64).sum().item()) & 0xFFFFFFFF
    want = int(words.to(torch.int64).sum().item()) & 0xFFFFFFFF
    return {"ok": got == want, "programs": grid, "got": got, "want": want}


# --------------------------------------------------------------------------------------------- compile
def warm_worker(names: list[str], quick: bool) -> int:
    """Compile (and check, at 1 MiB) the named Triton families; Triton's disk cache keeps the binaries for
    the main process. A fault ends this worker only."""
    dev = torch.device("cuda" if torch.cuda.is_available() and not quick else "cpu")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
    fams = triton_families(sms)
    g = torch.Generator(device=dev).manual_seed(1)
    words = torch.randn(MIB // 2, device=dev, dtype=torch.bfloat16, generator=g).view(torch.int32)
    out = torch.empty(1 << 16, device=dev, dtype=torch.int32)
    for name in names:
        t0 = time.time()
        try:
            res = check(fams[name], words, out)
            print(
                json.dumps({"name": name, "ok": res["ok"], "s": round(time.time() - t0, 2), "check": res}), flush=True
            )
        except Exception as e:  # noqa: BLE001 - the main process leaves the family out
            msg = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps({"name": name, "ok": False, "error": msg}), flush=True)
            if "CUDA" in msg or "illegal" in msg.lower():
                return 1
    return 0


def precompile(names: list[str], workers: int, timeout_s: float) -> dict[str, Any]:
    t0 = time.time()
    shards = [names[i::workers] for i in range(workers) if names[i::workers]]
    results = run_workers(__file__, shards, timeout_s)
    return {"results": results, "ok": [r["name"] for r in results if r.get("ok")], "wall_s": round(time.time() - t0, 2)}


# --------------------------------------------------------------------------------------------- timing
def kernel_spans(fns: dict[str, Any], device: torch.device, reps: int) -> dict[str, Any]:
    """Per callable: median GPU kernel span per call over ``reps`` calls, all interleaved in one profiler
    session (order reversed every other round), an L2 read flush before every call outside the range: the
    decode sweep's protocol (gemm_decode_sweep.kernel_spans), in microseconds."""
    from gemm_decode_sweep import kernel_spans as sweep_spans  # benchmarks/ is the script's directory

    out = {}
    for name, r in sweep_spans(fns, [()], device, reps).items():
        if "median_ms" in r:
            out[name] = {f"{k[:-3]}_us": r[k] * 1e3 for k in ("median_ms", "q1_ms", "q3_ms", "min_ms")}
            out[name]["samples"] = r["samples"]
    return out


def fit(points: list[tuple[float, float]]) -> dict[str, float]:
    """Least squares T = a + bytes / B over (bytes, seconds) points."""
    if len(points) < 2:
        return {}
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope <= 0:  # a span that does not grow with the bytes (the empty launches): no streaming rate
        return {"a_us": my * 1e6, "B_TBps": None, "max_abs_resid_us": (max(ys) - min(ys)) * 1e6}
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys)]
    return {"a_us": (my - slope * mx) * 1e6, "B_TBps": 1e-12 / slope, "max_abs_resid_us": max(map(abs, resid)) * 1e6}


class ReadFloor(BudgetedRun):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.time()
        cuda = torch.cuda.is_available() and not args.quick
        self.dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        props = torch.cuda.get_device_properties(self.dev) if cuda else None
        self.sms = props.multi_processor_count if props else 4
        self.doc: dict[str, Any] = {
            "benchmark": "read_floor",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "device": {"name": props.name, "sm_count": self.sms, "l2_bytes": props.L2_cache_size}
            if props
            else {"name": "cpu (Triton interpreter)"},
            "versions": versions(),
            "timing": {
                "kernel_span": "CUPTI kernel span per call (solkit.harness.kernel_timing.spans_from_trace), "
                "families of one size interleaved in one profiler session, read L2 flush before every call",
                "reps": args.reps,
            },  # fmt: skip
            "families": {},
            "sizes": [],
        }

    def callables(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int, fams: dict[str, dict]) -> dict[str, Any]:
        """name -> (zero-argument callable, bytes read, bytes written) at this size."""
        from solkit.kernels.gemm import dispatch as G

        words = src[: nbytes // 4]
        halfs = words.view(torch.bfloat16)
        out = self.partials
        fns = {name: (lambda s=spec, w=words: launch(s, w, out), nbytes, 0) for name, spec in fams.items()}
        if self.dev.type != "cuda":
            return fns
        fns["torch W.sum() (fp32 accum)"] = (lambda h=halfs: h.sum(dtype=torch.float32), nbytes, 0)
        w2 = halfs.view(-1, 4096)
        fns["torch.mv (cuBLAS GEMV, K=4096)"] = (lambda w2=w2, x=self.x: torch.mv(w2, x), nbytes, 0)
        fns["torch copy_ (read+write)"] = (lambda s=words, d=dst[: nbytes // 4]: d.copy_(s), nbytes, nbytes)
        cfg = {"kernel": "splitk", **G.load_config_table()["hopper"]["decode"]["autotune"][0]}
        res = self.res[:, : w2.shape[0]]
        fns["solkit decode GEMV (M=1 default config, +residual)"] = (
            lambda w2=w2, r=res, c=cfg: G.gemm(self.x[None, :], w2, residual=r, config=c),
            nbytes,
            0,
        )
        return fns

    def run(self) -> int:
        fams = triton_families(self.sms)
        if self.dev.type == "cuda":
            pre = precompile(list(fams), self.args.workers, self.args.compile_timeout_s)
            self.doc["precompile"] = pre
            self.log(f"precompile {len(pre['ok'])}/{len(fams)} ok in {pre['wall_s']} s; failed: "
                     f"{[r for r in pre['results'] if not r.get('ok')]}")  # fmt: skip
            fams = {n: s for n, s in fams.items() if n in pre["ok"]}
        self.doc["families"] = {n: {k: v for k, v in s.items() if not k.startswith("_")} for n, s in fams.items()}
        sizes = QUICK_SIZES_MIB if self.args.quick else self.args.sizes
        top = max(sizes) * MIB
        g = torch.Generator(device=self.dev).manual_seed(5)
        # random bf16 values (the GEMV families read them as numbers), read as int32 words by the others
        src = torch.randn(top // 2, device=self.dev, dtype=torch.bfloat16, generator=g).view(torch.int32)
        dst = torch.empty_like(src) if self.dev.type == "cuda" else src
        self.partials = torch.empty(top // 4096 + 8192, device=self.dev, dtype=torch.int32)
        self.x = torch.randn(4096, device=self.dev, dtype=torch.bfloat16, generator=g)
        self.res = torch.randn(1, top // 8192, device=self.dev, dtype=torch.bfloat16, generator=g)
        # correctness at 32 MiB (1 MiB in the interpreter) before any timing
        n_chk = (32 if 32 in sizes else max(sizes)) * MIB
        for name in list(fams):
            r = check(fams[name], src[: n_chk // 4], self.partials)
            self.doc["families"][name]["check"] = r
            if not r["ok"]:
                self.log(f"{name}: WRONG SUM {r}")
                fams.pop(name)
        self.save()
        if self.dev.type != "cuda":
            self.log(f"interpreter: {len(fams)} families checked")
            return 0
        for mib in sizes:
            if self.left() < 8:
                self.doc.setdefault("skipped_sizes", []).append(mib)
                continue
            fns = self.callables(src, dst, mib * MIB, fams)
            spans = kernel_spans({n: f for n, (f, _, _) in fns.items()}, self.dev, self.args.reps)
            rec = {"MiB": mib, "bytes": mib * MIB, "rows": {}}
            for name, (_, rd, wr) in fns.items():
                if name in spans:
                    s = spans[name]
                    rec["rows"][name] = {**s, "read_bytes": rd, "written_bytes": wr,
                                         "read_TBps": rd / s["median_us"] * 1e-6}  # fmt: skip
            self.doc["sizes"].append(rec)
            best = sorted(rec["rows"].items(), key=lambda kv: kv[1]["median_us"])[:4]
            self.log(f"{mib} MiB: " + "; ".join(f"{n} {r['median_us']:.2f} us" for n, r in best))
            self.save()
        self.fits()
        if 32 in sizes and self.left() > 10:
            self.harness_methods(src, dst, fams)
        self.fits()
        self.save()
        return 0

    def fits(self) -> None:
        out: dict[str, Any] = {}
        names = {n for s in self.doc["sizes"] for n in s["rows"]}
        for name in sorted(names):
            pts = [(s["bytes"], s["rows"][name]["median_us"] * 1e-6) for s in self.doc["sizes"] if name in s["rows"]]
            at32 = [s["rows"][name]["median_us"] for s in self.doc["sizes"] if s["MiB"] == 32 and name in s["rows"]]
            out[name] = {
                "fit_8_512MiB": fit([p for p in pts if p[0] >= 8 * MIB]),
                "fit_8_64MiB": fit([p for p in pts if 8 * MIB <= p[0] <= 64 * MIB]),
                "span_32MiB_us": at32[0] if at32 else None,
            }
        self.doc["fits"] = out
        ranked = sorted(((v["span_32MiB_us"] or 1e9, n, v) for n, v in out.items()))
        for t, n, v in ranked:
            f1, f2 = v["fit_8_512MiB"], v["fit_8_64MiB"]
            nan = float("nan")
            self.log(f"{n:52s} 32MiB {t:7.2f} us | a {f1.get('a_us') or nan:5.2f} us B {f1.get('B_TBps') or nan:5.2f} "
                     f"TB/s | 8-64: a {f2.get('a_us') or nan:5.2f} B {f2.get('B_TBps') or nan:5.2f}")  # fmt: skip

    def harness_methods(self, src, dst, fams) -> None:
        """At 32 MiB: each family through the harness's own entry points, timing.benchmark(method="kernel")
        and method="graph_events" (10 calls per graph, a read flush before each)."""
        from solkit.timing import benchmark

        fns = self.callables(src, dst, 32 * MIB, fams)
        at32 = next((s["rows"] for s in self.doc["sizes"] if s["MiB"] == 32), {})
        rec: dict[str, Any] = {}
        # fastest first (on the scan's span), so a short budget still cross-checks the ones that matter; the
        # torch and solkit rows always
        ranked = sorted(fns, key=lambda n: at32.get(n, {}).get("median_us", 1e9))
        keep = ranked[: self.args.harness_top] + [n for n in ranked if n.startswith(("torch", "solkit"))]
        for name in dict.fromkeys(keep):
            fn = fns[name][0]
            if self.left() < 6:
                break
            row: dict[str, Any] = {}
            for method in ("kernel", "graph_events"):
                try:
                    r = benchmark(fn, None, method=method, reps=self.args.reps, trials=1, warmup=2, device=self.dev)
                    row[method] = {"median_us": r.median_ms * 1e3, "q1_us": r.q1_ms * 1e3, "q3_us": r.q3_ms * 1e3,
                                   "method": r.method}  # fmt: skip
                except Exception as e:  # noqa: BLE001 - a cross-check; the scan stands without it
                    row[method] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            rec[name] = row
            self.log(f"harness 32 MiB {name:52s} kernel {row['kernel'].get('median_us', float('nan')):6.2f} us "
                     f"graph_events {row['graph_events'].get('median_us', float('nan')):6.2f} us")  # fmt: skip
            self.doc["harness_32MiB"] = rec
            self.save()


def render(path: str, top: int = 8) -> str:
    """Markdown: the fastest families at 32 MiB with their fits, then per size the fastest read and its rate."""
    doc = json.loads(Path(path).read_text())
    fits = doc.get("fits") or {}
    at = {s["MiB"]: s["rows"] for s in doc["sizes"]}
    lines = [f"{doc['device']['name']}, {doc['date']}, torch {doc['versions']['torch']}, triton "
             f"{doc['versions']['triton']}; kernel span (CUPTI), median of {doc['timing']['reps']} calls.", "",
             "| family | 32 MiB us | fit 8-512 MiB: a us, B TB/s | fit 8-64 MiB: a us, B TB/s |",
             "|---|---|---|---|"]  # fmt: skip
    ranked = sorted(((n, f) for n, f in fits.items() if not n.startswith("empty")),
                    key=lambda kv: kv[1].get("span_32MiB_us") or 1e9)  # fmt: skip
    for name, f in ranked[:top] + [kv for kv in ranked[top:] if kv[0].startswith(("torch", "solkit"))]:
        a, b = f["fit_8_512MiB"], f["fit_8_64MiB"]
        cell = lambda g: f"{g['a_us']:.2f}, {g['B_TBps']:.2f}" if g.get("B_TBps") else "-"  # noqa: E731
        lines.append(f"| {name} | {f['span_32MiB_us']:.2f} | {cell(a)} | {cell(b)} |")
    empties = {n: f["span_32MiB_us"] for n, f in fits.items() if n.startswith("empty")}
    lines += ["", "Launch alone: " + "; ".join(f"{n} {t:.2f} us" for n, t in empties.items() if t), ""]
    lines += ["| MiB | fastest read (family) | span us | bytes / span TB/s |", "|---|---|---|---|"]
    for mib in sorted(at):
        reads = {n: r for n, r in at[mib].items() if not n.startswith(("empty", "torch copy"))}
        name, r = min(reads.items(), key=lambda kv: kv[1]["median_us"])
        lines.append(f"| {mib} | {name} | {r['median_us']:.2f} | {mib * MIB / r['median_us'] * 1e-6:.2f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="read_floor.json")
    p.add_argument("--budget-s", type=float, default=90.0)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--sizes", type=int, nargs="*", default=list(SIZES_MIB), help="MiB")
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--compile-timeout-s", type=float, default=30.0)
    p.add_argument("--harness-top", type=int, default=12, help="families cross-checked by the harness at 32 MiB")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--warm-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--render", default=None, help="print a result file as markdown tables and exit")
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    if args.warm_worker:
        return warm_worker(json.loads(args.warm_worker), args.quick)
    return ReadFloor(args).run()


if __name__ == "__main__":
    sys.exit(main())
