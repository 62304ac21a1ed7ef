#!/usr/bin/env python3
# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""Decode GEMM in Gluon (gemm_decode_gluon.py, swap-AB wgmma over a TMA ring) against the Triton decode kernels,
cuBLAS and the bare read floors of the same structures, at M in {1, 16, 64}, K = N = 4096 (issue 6's open rows).

The op is ``y = x @ W.T + residual`` in bf16; score: memory SOL on the calibrated copy bandwidth (4.23 TB/s),
T_SOL = (N*K + M*K + 2*M*N) * 2 bytes / bandwidth. Every GEMM variant is first checked on two random input sets
with a NaN-poisoned output against an fp32 reference (relative Frobenius error at most 2x cuBLAS addmm's own +
1e-3). Timing: the kernel span per call (CUDA profiler; the harness's ``method="kernel"``), every variant of a
shape interleaved in one profiler session, each call after a 2xL2 read flush (gemm_decode_sweep.kernel_spans);
the baselines and the fastest Gluon variant also through ``timing.benchmark(method="kernel")``.

Floors (same job, same W): the Gluon ring reading W with no math (``NO_MATH`` 2: TMA ring only; 1: ring plus the
split reductions and epilogue, no x, no wgmma) and Triton's fastest 32 MiB reader (8 KB per program).

    python lab/benchmarks/gemm_decode_gluon.py --out $OUT/gemm_decode_gluon.json [--budget-s 200] [--plan r1]
    python lab/benchmarks/gemm_decode_gluon.py --list          # the variants per shape, no GPU needed
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _budgeted_run import BudgetedRun, run_workers, versions  # noqa: E402  (benchmarks/ is the script's directory)
from gemm_decode_sweep import (
    check_variants,
    cublas_baselines,
    decode_inputs,
    gemm_or_cublas,
    kernel_spans,
    normalize,
    record_spans,
    references,
)

from solkit.kernels.gemm import dispatch as G

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for lab.kernels
from lab.kernels import gemm_decode_gluon as D  # noqa: E402

BANDWIDTH = 4.23e12
SMEM_BUDGET = 220 * 1024
#: the Triton decode configs gemm()'s default path chose in the table of record (benchmarks/results/gemm/2026-11-30_h200_decode_1133.json)
TRITON_DEFAULT_ROW = {1: 0, 16: 4, 64: 9}


def per_sm(cfg: D.DecodeGluonConfig, sms: int = 132) -> int:
    """Programs that must be resident on one SM at once for the grid to run in one wave."""
    return max(cfg.ctas_per_sm, -(-cfg.grid // sms)) if cfg.grid else cfg.ctas_per_sm


def smem_budget(cfg: D.DecodeGluonConfig) -> int:
    return SMEM_BUDGET if per_sm(cfg) == 1 else 228 * 1024 // per_sm(cfg) - 2048  # co-resident programs


def fit(cfg: D.DecodeGluonConfig, m: int) -> D.DecodeGluonConfig:
    """The config with its stages cut to fit shared memory at this M (x's ring grows with M)."""
    st = cfg.stages
    while st > 2 and dataclasses.replace(cfg, stages=st).smem_bytes(D.padded_m(m)) > smem_budget(cfg):
        st -= 1
    return dataclasses.replace(cfg, stages=st)


def gluon_plan(plan: str) -> list[D.DecodeGluonConfig]:
    C = D.DecodeGluonConfig
    if plan == "smoke":
        return [C(), C(no_math=2)]
    base = [
        C(bw=128, ksub=2, stages=6),
        C(bw=128, ksub=2, stages=6, pre_res=0),
        C(bw=128, ksub=1, stages=10),
        C(bw=128, ksub=4, stages=3),
        C(bw=64, ksub=2, stages=10),
        C(bw=64, ksub=4, stages=5),
        C(bw=64, ksub=1, stages=16),
        C(bw=256, ksub=1, stages=6),
        C(bw=128, ksub=2, stages=6, warps=8),
        C(bw=128, ksub=2, stages=3, ctas_per_sm=2),
        C(bw=64, ksub=2, stages=5, ctas_per_sm=2),
        C(bw=64, ksub=1, stages=5, ctas_per_sm=4),
        C(bw=128, ksub=2, stages=6, grid=128),
        C(bw=64, ksub=4, stages=5, grid=128),
        C(bw=64, ksub=8, stages=3),
        C(bw=64, ksub=2, stages=6, ctas_per_sm=3),
        # no split at K = N = 4096: one 64-row tile per program (64 programs, 512 KB each, no reduction tail)
        C(bw=64, ksub=4, stages=6, grid=64),
        C(bw=64, ksub=2, stages=12, grid=64),
    ]
    floors = [
        C(bw=128, ksub=2, stages=6, no_math=2),
        C(bw=128, ksub=2, stages=6, no_math=1),
        C(bw=64, ksub=2, stages=10, no_math=2),
        C(bw=128, ksub=1, stages=10, no_math=2),
        C(bw=128, ksub=2, stages=3, ctas_per_sm=2, no_math=2),
        C(bw=64, ksub=1, stages=5, ctas_per_sm=4, no_math=2),
        C(bw=128, ksub=4, stages=4, no_math=2),
        C(bw=64, ksub=8, stages=3, no_math=2),
        C(bw=64, ksub=4, stages=6, grid=64, no_math=2),
    ]
    if plan == "r3":
        # round 3 (the account of record): the fastest Gluon structures of round 2 taken apart, and the producer warp
        best = [C(bw=128, ksub=2, stages=3, grid=256), C(bw=64, ksub=4, stages=5, grid=128)]
        return [dataclasses.replace(c, no_math=nm) for c in best for nm in (0, 3, 1, 2)] + [
            C(bw=64, ksub=4, stages=5, grid=128, ws=1)
        ]
    if plan == "r2":
        # round 2: the best structures of round 1 taken apart (NO_MATH 2: the ring; 3: + x and wgmma; 1: + the split
        # reduction and epilogue without the math; 0: everything), and tile-aligned grids of 2 programs per SM
        best = [C(bw=128, ksub=2, stages=3, ctas_per_sm=2), C(bw=64, ksub=4, stages=5, grid=128),
                C(bw=64, ksub=1, stages=5, ctas_per_sm=4)]  # fmt: skip
        out = [dataclasses.replace(c, no_math=nm) for c in best for nm in (0, 3, 1, 2)]
        out += [C(bw=128, ksub=2, stages=3, grid=256), C(bw=64, ksub=4, stages=3, grid=256),
                C(bw=64, ksub=2, stages=5, grid=256), C(bw=64, ksub=4, stages=3, grid=256, no_math=2),
                C(bw=128, ksub=2, stages=3, grid=256, no_math=2)]  # fmt: skip
        # a producer warp refilling the ring (warp-specialised) on the same structures, and on deep 1-per-SM rings
        out += [dataclasses.replace(c, ws=1) for c in best]
        out += [C(bw=128, ksub=2, stages=6, ws=1), C(bw=64, ksub=4, stages=5, ws=1),
                C(bw=128, ksub=2, stages=3, grid=256, ws=1)]  # fmt: skip
        return out
    return base + floors


#: round 2: Triton read kernels of lab/benchmarks/_read_kernels.py over the same W (the bare floors of the Triton
#: decode kernels' structures: pointer chunks, the GEMV with and without x, the persistent GEMV, TMA tiles, launch)
TRITON_FLOORS = [
    "chunk 8KB b2048x1 w4",
    "gemv rows 1x4096 b4096 w4",
    "gemv rows 1x4096 b4096 w4 NO x (W row sums)",
    "gemv rows 2x4096 b4096 w4",
    "gemv persist 4/SM 2x4096 w4",
    "rows 4x2048w b512w w4 (GEMV pattern)",
    "tma persist 2/SM 16KBx3 w4",
    "tma persist 4/SM 8KBx3 w4",
    "tma chunk 4x16KB st4 w4",
    "pipe 2/SM b2048 st4 w4",
    "empty (no reads) 4/SM",
]


def variants(m: int, plan: str) -> list[D.DecodeGluonConfig]:
    out, seen = [], set()
    for c in gluon_plan(plan):
        c = fit(c, m)
        if c.no_math and m != 1 and c.no_math == 2:
            continue  # the bare ring read does not depend on M: measured at M = 1 only
        if c.smem_bytes(D.padded_m(m)) > smem_budget(c):
            continue  # one wave would not fit
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def warm_worker(shard: list) -> int:
    """Compile (launch once at the real shape) each [M, N, K, config] of the shard; prints a JSON line per item."""
    dev = torch.device("cuda", torch.cuda.current_device())
    for m, n, k, cfgd in shard:
        t0 = time.time()
        cfg = D.DecodeGluonConfig(**cfgd)
        try:
            w, pool = decode_inputs(m, n, k, dev, 1, sets=1)
            x, _, r = pool[0]
            y = D.gemm_decode_gluon(x, w, residual=r, config=cfg)
            torch.cuda.synchronize(dev)
            if not cfg.no_math:
                ref = x.float() @ w.float().t() + r.float()
                err = ((y.float() - ref).norm() / ref.norm()).item()
                if not err < 0.05:
                    raise RuntimeError(f"wrong result: relative error {err:.3g}")
            print(json.dumps({"ok": True, "s": round(time.time() - t0, 2), "item": [m, n, k, cfgd]}), flush=True)
        except Exception as e:  # noqa: BLE001 - the main process leaves the config out
            msg = f"{type(e).__name__}: {str(e)[:400]}"
            print(json.dumps({"ok": False, "error": msg, "item": [m, n, k, cfgd]}), flush=True)
            if "CUDA" in msg or "illegal" in msg.lower():
                return 1
    return 0


class Job(BudgetedRun):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.time()
        self.device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.device)
        self.doc: dict[str, Any] = {
            "benchmark": "gemm_decode_gluon",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "device": {
                "name": props.name,
                "sm_count": props.multi_processor_count,
                "capability": list(torch.cuda.get_device_capability(self.device)),
            },  # fmt: skip
            "versions": versions(),
            "dtype": "bfloat16",
            "op": "y = x @ W.T + residual; bytes = (N*K + M*K + 2*M*N) * 2",
            "bandwidth_basis": {"calibrated_copy_Bps": args.bandwidth, "source": "H200 calibrated copy (issue 6)"},
            "timing": {
                "harness_median": "kernel_span: CUPTI kernel span per call, variants interleaved in one "
                "profiler session, read L2 flush before every call",
                "kernel_span_reps": args.reps,
                "inputs": "4 rotating (x, residual) sets",
            },  # fmt: skip
            "shapes": [],
        }

    def shapes(self) -> list[tuple[int, int, int]]:
        return [(m, k, k) for k in self.args.k for m in self.args.m]

    def precompile(self) -> None:
        items = [[m, n, k, dataclasses.asdict(c)] for m, n, k in self.shapes() for c in variants(m, self.args.plan)]
        t0 = time.time()
        shards = [items[i :: self.args.workers] for i in range(self.args.workers) if items[i :: self.args.workers]]
        res = run_workers(__file__, shards, self.args.compile_timeout_s)
        self.ok = {json.dumps(r["item"], sort_keys=True) for r in res if r.get("ok")}
        self.doc["precompile"] = {"items": len(items), "ok": len(self.ok), "failed": [r for r in res if not r["ok"]],
                                  "not_run": len(items) - len(res), "wall_s": round(time.time() - t0, 1)}  # fmt: skip
        self.log(f"precompile: {len(self.ok)} of {len(items)} ok in {time.time() - t0:.1f}s; failed: "
                 f"{[r['error'][:120] for r in res if not r['ok']][:6]}")  # fmt: skip

    def shape(self, m: int, n: int, k: int) -> None:
        dev = self.device
        w, pool = decode_inputs(m, n, k, dev, m * 31 + n * 7 + k)
        nbytes = 2.0 * (n * k + m * k + 2 * m * n)
        t_sol_ms = nbytes / self.args.bandwidth * 1e3
        rec: dict[str, Any] = {"M": m, "N": n, "K": k, "bytes": nbytes, "t_sol_ms": t_sol_ms, "rows": []}
        refs = references(pool, w)
        rows: dict[str, dict[str, Any]] = {}
        fns: dict[str, Any] = cublas_baselines()
        for name in fns:
            rows[name] = {"variant": name, "source": "baseline"}
        tcfg = normalize(G.load_config_table()["hopper"]["decode"]["autotune"][TRITON_DEFAULT_ROW[m]])
        name = "triton decode (round-5 default config)"
        rows[name] = {"variant": name, "source": "baseline", "config": tcfg}
        fns[name] = lambda x, w, r, c=tcfg: G.gemm(x, w, residual=r, config=c)
        if self.args.default_path:
            name = "solkit gemm() default path"
            rows[name] = {"variant": name, "source": "baseline"}
            fns[name] = lambda x, w, r: G.gemm(x, w, residual=r)
        for c in variants(m, self.args.plan):
            key = json.dumps([m, n, k, dataclasses.asdict(c)], sort_keys=True)
            name = c.name
            src = "floor" if c.no_math else "gluon"
            rows[name] = {"variant": name, "source": src, "config": dataclasses.asdict(c),
                          "programs": D.program_count(c, n, k, 132), "smem": c.smem_bytes(D.padded_m(m))}  # fmt: skip
            if key not in self.ok:
                rows[name].update(correct=False, error="left out: failed or not reached in the precompile workers")
                continue
            fns[name] = lambda x, w, r, c=c: D.gemm_decode_gluon(x, w, residual=r, config=c)
        if self.args.plan in ("r2", "r3"):  # every Triton decode config of the row class: the fastest of each structure
            from gemm_decode_sweep import label, variants_for

            compiled = self.doc.get("triton_precompile", {}).get("ok", [])
            for v in variants_for(m, n, "hopper", "autotune"):
                name = "triton " + label(v["config"])
                if name in rows or json.dumps(v["config"], sort_keys=True) not in compiled:
                    continue
                rows[name] = {"variant": name, "source": "triton", "config": v["config"]}
                fns[name] = lambda x, w, r, c=v["config"]: G.gemm(x, w, residual=r, config=c)
            name = "triton default config (no residual)"
            rows[name] = {"variant": name, "source": "triton", "config": tcfg}
            fns[name] = lambda x, w, r, c=tcfg: G.gemm(x, w, config=c)
        if m == 1:
            from _read_kernels import launch, triton_families

            words = w.view(torch.int32).reshape(-1)
            sink = torch.empty(2 * words.numel() // 2048, dtype=torch.int32, device=dev)
            fams = triton_families(132)
            names = TRITON_FLOORS if self.args.plan in ("r2", "r3") else TRITON_FLOORS[:1]
            for fam in names:
                name = f"floor: triton {fam}"
                rows[name] = {"variant": name, "source": "floor", "spec": {k: v for k, v in fams[fam].items()}}
                fns[name] = lambda x, w, r, s=fams[fam], wd=words, o=sink: launch(s, wd, o)
        gemm_run = gemm_or_cublas(fns, w)

        def run(name, row, x, r):
            if row["source"] != "gluon":
                return gemm_run(name, row, x, r)
            y = torch.full_like(r, float("nan"))
            return D.gemm_decode_gluon(x, w, residual=r, config=D.DecodeGluonConfig(**row["config"]), out=y)

        check_variants(fns, rows, pool, w, refs, run, skip=("floor",))
        torch.cuda.synchronize(dev)
        spans = kernel_spans(fns, pool, dev, self.args.reps)
        record_spans(rows, spans, t_sol_ms)
        ranked = sorted((r for r in rows.values() if r.get("kernel_span", {}).get("median_ms")),
                        key=lambda r: r["kernel_span"]["median_ms"])  # fmt: skip
        if self.left() > 10:  # the harness's own entry point on the baselines and the two fastest Gluon rows
            from solkit.timing import benchmark

            best = [r["variant"] for r in ranked if r["source"] == "gluon"][:2]
            for name in [n for n in fns if rows[n]["source"] == "baseline"] + best:
                try:
                    t = benchmark(fns[name], pool, method="kernel", reps=self.args.reps, trials=1, warmup=2,
                                  device=dev)  # fmt: skip
                    rows[name]["harness_kernel"] = {**t.to_dict(), "sol": min(1.0, t_sol_ms / t.median_ms)}
                except Exception as e:  # noqa: BLE001
                    rows[name]["harness_kernel"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        rec["rows"] = list(rows.values())
        self.doc["shapes"].append(rec)
        self.save()
        for r in ranked:
            hk = r.get("harness_kernel", {}).get("median_ms")
            self.log(f"{m}x{n}x{k} {r['variant']:58s} span {r['kernel_span']['median_ms'] * 1e3:6.2f} us "
                     f"SOL {r['sol_kernel_span']:.3f}" + (f" | harness {hk * 1e3:6.2f}" if hk else ""))  # fmt: skip
        for r in rows.values():
            if r["source"] != "floor" and not r.get("correct"):
                self.log(f"{m}x{n}x{k} {r['variant']}: NOT CORRECT {r.get('error', r.get('check'))}")

    def run(self) -> int:
        self.precompile()
        if self.args.plan in ("r2", "r3"):  # the Triton decode configs, compiled in workers as gemm_decode_sweep does
            from gemm_decode_sweep import precompile as triton_precompile
            from gemm_decode_sweep import variants_for

            cfgs = {json.dumps(v["config"], sort_keys=True) for m, n, _ in self.shapes()
                    for v in variants_for(m, n, "hopper", "autotune")}  # fmt: skip
            self.doc["triton_precompile"] = triton_precompile([json.loads(c) for c in sorted(cfgs)], self.args.workers,
                                                              self.args.compile_timeout_s)  # fmt: skip
            self.log(f"triton precompile: {len(self.doc['triton_precompile']['ok'])} of {len(cfgs)} ok")
        self.save()
        for m, n, k in self.shapes():
            if self.left() < 8:
                self.doc.setdefault("skipped", []).append([m, n, k])
                continue
            try:
                self.shape(m, n, k)
            except Exception as e:  # noqa: BLE001 - one shape's failure keeps the others
                self.doc.setdefault("errors", []).append({"shape": [m, n, k], "error": f"{type(e).__name__}: {e}"})
                self.log(f"{m}x{n}x{k} failed: {type(e).__name__}: {e}")
            self.save()
        return 0


def render(path: str, top: int = 40) -> str:
    """Markdown: per shape every timed row by kernel span (the harness's median), SOL on the file's bandwidth."""
    doc = json.loads(Path(path).read_text())
    bw = doc["bandwidth_basis"]["calibrated_copy_Bps"]
    lines = [f"{doc['device']['name']}, {doc['date']}, torch {doc['versions']['torch']}, triton "
             f"{doc['versions']['triton']}; SOL on {bw / 1e12:.2f} TB/s.", "",
             "| shape | variant | kind | programs | kernel span us | SOL | harness kernel us | correct |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for shp in doc["shapes"]:
        rows = sorted((r for r in shp["rows"] if r.get("kernel_span", {}).get("median_ms")),
                      key=lambda r: r["kernel_span"]["median_ms"])  # fmt: skip
        for r in rows[:top]:
            hk = r.get("harness_kernel", {}).get("median_ms")
            ok = "-" if r["source"] == "floor" else ("yes" if r.get("correct") else "NO")
            lines.append(f"| {shp['M']}x{shp['N']}x{shp['K']} | {r['variant']} | {r['source']} | "
                         f"{r.get('programs', '')} | {r['kernel_span']['median_ms'] * 1e3:.2f} | "
                         f"{r['sol_kernel_span']:.3f} | {f'{hk * 1e3:.2f}' if hk else '-'} | {ok} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gemm_decode_gluon.json")
    p.add_argument("--budget-s", type=float, default=200.0)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--plan", default="r1")
    p.add_argument("--m", type=int, nargs="*", default=[1, 16, 64])
    p.add_argument("--k", type=int, nargs="*", default=[4096])
    p.add_argument("--bandwidth", type=float, default=BANDWIDTH)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--compile-timeout-s", type=float, default=90.0)
    p.add_argument("--default-path", action="store_true", help="also time gemm()'s own default path")
    p.add_argument("--list", action="store_true", help="print the variants per M and exit")
    p.add_argument("--render", default=None, help="print a result file as a markdown table and exit")
    p.add_argument("--warm-worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    if args.list:
        for m in args.m:
            for c in variants(m, args.plan):
                print(m, c.name, c.smem_bytes(D.padded_m(m)))
        return 0
    if args.warm_worker:
        return warm_worker(json.loads(args.warm_worker))
    return Job(args).run()


if __name__ == "__main__":
    sys.exit(main())
