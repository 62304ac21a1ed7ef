#!/usr/bin/env python3
"""The warp-specialised Gluon GEMM (solkit.kernels.gemm.gluon) against cuBLAS and the Triton kernel.

``y = x @ W.T + residual`` in bf16 at issue 6's prefill shapes. Two phases, each writing JSON:

* ``--phase check``: compile each Gluon config and check it against an fp32 reference on small and odd
  shapes (odd M, bias, no residual, fp16, SiLU), then on one 4096^3 call; compile errors are printed in
  full. Run one process per config (a deadlocked kernel then only loses its own process).
* ``--phase time``: per shape, rows cuBLAS matmul (no residual: the floor), cuBLAS addmm (beta=1),
  the Triton kernel (gemm.py, a fixed config: the first autotune entry of the Hopper prefill list),
  each Gluon config with the residual, and the --plain configs (default: the first) without it. Every row is checked
  against fp32 first (relative Frobenius error <= 2x addmm's own + 1e-3); then all rows are timed in
  interleaved round-robin trials (order reversed every other trial) with the harness
  (solkit.harness.timing.benchmark, method 'auto': CUDA events per call for these lengths, read L2
  flush, 2 rotating input sets); a row's time is the median of its trial medians, with their spread.

    python lab/benchmarks/gemm_gluon_bench.py --phase check --config pp128 --out $OUT/check_pp128.json
    python lab/benchmarks/gemm_gluon_bench.py --phase time --config pp128,coop --out $OUT/time.json
    python lab/benchmarks/gemm_gluon_bench.py --render FILE.json      # the time phase's rows as markdown
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import triton

from solkit.kernels.gemm import dispatch as G
from solkit.kernels.gemm import gluon as GG

PREFILL = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 4096, 4096), (8192, 8192, 8192)]  # (M, N, K)

#: named configs (CONSUMERS 2: ping-pong, 1: cooperative)
PP = GG.PINGPONG
COOP = GG.GluonConfig()
NAMED = {
    "default": GG.DEFAULT_CONFIG,
    "pp128": PP,
    "pp128r192": dataclasses.replace(PP, consumer_regs=192, producer_regs=24),
    "pp64x256": dataclasses.replace(PP, block_m=64, block_n=256),
    "pp128e": dataclasses.replace(PP, res_early=True),
    "pp128k32": dataclasses.replace(PP, res_k=32),
    "coop": dataclasses.replace(COOP, res_k=-1),
    "coopk2": dataclasses.replace(COOP, res_k=2),
    "coopk4": dataclasses.replace(COOP, res_k=4),
    "coopk8": dataclasses.replace(COOP, res_k=8),
    "coopk16": COOP,
    "coopk32": dataclasses.replace(COOP, res_k=32),
    "coopk16g16": dataclasses.replace(COOP, group_m=16),
    "coopk16e": dataclasses.replace(COOP, res_early=True),
    "coopk32e": dataclasses.replace(COOP, res_k=32, res_early=True),
    "coopk16rs4": dataclasses.replace(COOP, res_split=4),
}


def triton_config() -> dict[str, Any]:
    """The Triton kernel's first Hopper prefill autotune entry (a fixed compile: no tuning in the job)."""
    cfg = dict(G.load_config_table()["hopper"]["prefill"]["autotune"][0])
    cfg.pop("m_min", None)
    cfg.pop("m_max", None)
    return {"kernel": "tma_persistent", **cfg}


def doc_header(args: argparse.Namespace) -> dict[str, Any]:
    dev: dict[str, Any] = {"name": "cpu"}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        dev = {"name": p.name, "capability": list(torch.cuda.get_device_capability()),
               "sm_count": p.multi_processor_count}  # fmt: skip
    return {
        "benchmark": "gemm_gluon",
        "phase": args.phase,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": dev,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
        },  # fmt: skip
        "configs": {n: vars(NAMED[n]) for n in args.configs},
    }


def save(doc: dict[str, Any], path: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


def torch_native(x, w, b, r, alpha: float, beta: float, act: str) -> torch.Tensor:
    """The op in x's dtype with torch (cuBLAS + elementwise): the error budget's baseline."""
    return G.native(x, w, b, r, alpha=alpha, beta=beta, activation=act)


def check_case(cfg, m, n, k, dtype, bias: bool, residual: bool, act: str, seed: int) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=g) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None
    r = torch.randn(m, n, device="cuda", dtype=dtype, generator=g) if residual else None
    alpha, beta = (0.5, 2.0) if act != "none" else (1.0, 1.0)
    ref = G.reference(x.float(), w.float(), None if b is None else b.float(), None if r is None else r.float(),
                      alpha=alpha, beta=beta, activation=act)  # fmt: skip
    torch_out = torch_native(x, w, b, r, alpha, beta, act)
    torch_err = rel_err(torch_out, ref)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # poisoned: every element must be written
    GG.gemm_gluon(x, w, b, r, activation=act, alpha=alpha, beta=beta, config=cfg, out=y)
    torch.cuda.synchronize()
    err = rel_err(y, ref)
    allowed = 2 * torch_err + 1e-3
    ok = bool(torch.isfinite(y).all().item()) and err <= allowed
    return {"M": m, "N": n, "K": k, "dtype": str(dtype).replace("torch.", ""), "bias": bias, "residual": residual,
            "act": act, "rel_err": err, "torch_rel_err": torch_err, "allowed": allowed, "correct": ok}  # fmt: skip


CHECK_CASES = [  # (M, N, K, dtype, bias, residual, act)
    (256, 256, 128, torch.bfloat16, False, True, "none"),
    (1000, 512, 320, torch.bfloat16, False, True, "none"),  # odd M, K not a multiple of BLOCK_K
    (777, 384, 256, torch.bfloat16, True, True, "none"),
    (777, 384, 256, torch.bfloat16, True, False, "none"),
    (517, 1024, 512, torch.float16, True, True, "silu"),
    (300, 256, 4096, torch.bfloat16, False, True, "gelu_tanh"),
    (2048, 2048, 256, torch.bfloat16, False, True, "none"),  # ~2 tiles per program, 4-16 k-steps per tile
    (4096, 4096, 4096, torch.bfloat16, False, True, "none"),
]
#: --cases: small lists that isolate a failure (ping-pong's second consumer only runs with > 1 tile per program)
CASE_LISTS = {
    "default": CHECK_CASES,
    "multi_res": [(2048, 2048, 256, torch.bfloat16, False, True, "none")],
    "multi_nores": [(2048, 2048, 256, torch.bfloat16, False, False, "none")],
    "multi_bias": [(2048, 2048, 256, torch.bfloat16, True, False, "none")],
}


def phase_check(args: argparse.Namespace) -> int:
    doc = doc_header(args)
    doc["results"] = {}
    failed = 0
    for name in args.configs:
        cfg = NAMED[name]
        res: dict[str, Any] = {"config": vars(cfg), "cases": []}
        doc["results"][name] = res
        try:
            t0 = time.time()
            for i, case in enumerate(CASE_LISTS[args.cases]):
                row = check_case(cfg, *case, seed=1234 + i)
                res["cases"].append(row)
                print(f"{name} {row}", flush=True)
                if i == 0:
                    res["first_call_s"] = time.time() - t0
                save(doc, args.out)
            res["correct"] = all(c["correct"] for c in res["cases"]) and len(res["cases"]) == len(
                CASE_LISTS[args.cases]
            )
        except Exception as e:  # noqa: BLE001 - a failing config is reported in full, the others go on
            res["correct"] = False
            res["error"] = f"{type(e).__name__}: {e}"
            res["traceback"] = traceback.format_exc()
            print(f"{name} FAILED\n{res['traceback']}", flush=True)
        failed += not res["correct"]
        print(f"{name}: correct={res['correct']}", flush=True)
        save(doc, args.out)
    return 1 if failed else 0


def interleave(fns: dict[str, Any], pool, trials: int, reps: int, deadline: float) -> dict[str, dict[str, Any]]:
    from solkit.timing import benchmark

    out: dict[str, dict[str, Any]] = {n: {"trials": []} for n in fns}
    names = list(fns)
    for t in range(trials):
        if t and time.time() > deadline:
            break
        for name in names if t % 2 == 0 else names[::-1]:
            if "error" in out[name]:
                continue
            try:
                r = benchmark(fns[name], pool, method="auto", reps=reps, trials=1, warmup=2, l2_flush_mode="read")
                out[name]["trials"].append(r.to_dict())
            except Exception as e:  # noqa: BLE001
                out[name]["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    for d in out.values():
        meds = [t["median_ms"] for t in d["trials"]]
        if meds:
            d.update(median_ms=statistics.median(meds), trial_medians_ms=meds, spread_ms=max(meds) - min(meds),
                     method=d["trials"][0]["method"])  # fmt: skip
    return out


def phase_time(args: argparse.Namespace) -> int:
    t_start = time.time()
    deadline = t_start + args.budget_s
    doc = doc_header(args)
    doc["timing"] = {"harness": "solkit.harness.timing.benchmark", "method": "auto", "l2_flush_mode": "read",
                     "reps": args.reps, "trials": args.trials, "input_sets": 2,
                     "triton_config": triton_config()}  # fmt: skip
    doc["rows"] = []
    tcfg = triton_config()
    for m, n, k in args.shapes:
        if time.time() > deadline - 5:
            doc.setdefault("skipped", []).append([m, n, k])
            continue
        g = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) / k**0.5
        pool = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g), w,
                 torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)) for _ in range(2)]  # fmt: skip
        x, _, r = pool[0]
        ref_mm = x.float() @ w.float().t()
        ref = ref_mm + r.float()
        torch_err = rel_err(torch.addmm(r, x, w.t()), ref)
        variants: list[tuple[str, Any, bool]] = [
            ("cuBLAS mm (no residual)", lambda x, w, r: torch.matmul(x, w.t()), False),
            ("cuBLAS addmm (beta=1)", lambda x, w, r: torch.addmm(r, x, w.t()), True),
            ("triton fused (gemm.py)", lambda x, w, r: G.gemm(x, w, residual=r, config=tcfg), True),
            ("solkit gemm() default dispatch", lambda x, w, r: G.gemm(x, w, residual=r), True),
        ]
        for name in args.configs:
            variants.append((f"gluon {name}", lambda x, w, r, c=NAMED[name]: GG.gemm_gluon(x, w, None, r, config=c),
                             True))  # fmt: skip
        for name in [c for c in args.plain if c in args.configs] or args.configs[:1]:
            variants.append((f"gluon {name} no residual",
                             lambda x, w, r, c=NAMED[name]: GG.gemm_gluon(x, w, config=c), False))  # fmt: skip
        fns: dict[str, Any] = {}
        rows: dict[str, dict[str, Any]] = {}
        for name, fn, with_res in variants:
            row: dict[str, Any] = {"M": m, "N": n, "K": k, "variant": name}
            rows[name] = row
            try:
                out = fn(*pool[0])
                torch.cuda.synchronize()
                err = rel_err(out, ref if with_res else ref_mm)
                allowed = 2 * torch_err + 1e-3
                row.update(rel_err=err, allowed_rel_err=allowed,
                           correct=bool(torch.isfinite(out).all().item()) and err <= allowed)  # fmt: skip
                if name.startswith("solkit gemm()"):
                    row["launch"] = {k: G.LAST_LAUNCH.get(k) for k in ("kernel", "family", "regime", "config")}
                if row["correct"]:
                    fns[name] = fn
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                print(f"{m}x{n}x{k} {name} FAILED\n{traceback.format_exc()}", flush=True)
        timings = interleave(fns, pool, args.trials, args.reps, deadline - 3)
        mm = timings.get("cuBLAS mm (no residual)", {}).get("median_ms")
        addmm = timings.get("cuBLAS addmm (beta=1)", {}).get("median_ms")
        for name, row in rows.items():
            t = timings.get(name, {})
            if "median_ms" in t:
                row.update(median_ms=t["median_ms"], spread_ms=t["spread_ms"], trial_medians_ms=t["trial_medians_ms"],
                           method=t["method"], tflops=2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12)  # fmt: skip
                if mm and addmm:
                    row["over_mm"] = t["median_ms"] / mm - 1
                    row["vs_addmm_speedup"] = addmm / t["median_ms"]
            elif "error" in t:
                row["error"] = t["error"]
            doc["rows"].append(row)
            ms = row.get("median_ms")
            extra = (
                f"  over mm {row['over_mm'] * 100:+.1f} %  vs addmm {row['vs_addmm_speedup']:.3f}x" if ms and mm else ""
            )
            print(f"{m}x{n}x{k} {name:34s} {f'{ms * 1e3:8.1f} us' if ms else row.get('error', 'incorrect')[:60]}"
                  f"  (spread {row.get('spread_ms', 0) * 1e3:.1f})  err {row.get('rel_err', float('nan')):.2e}{extra}",
                  flush=True)  # fmt: skip
        save(doc, args.out)
        del pool, ref, ref_mm
    doc["wall_s"] = time.time() - t_start
    save(doc, args.out)
    return 0


def render(path: str) -> str:
    """A time-phase JSON as a markdown table: us (spread), over cuBLAS mm, speed-up over addmm, rel. error."""
    doc = json.loads(Path(path).read_text())
    lines = ["| shape | variant | us (spread) | over cuBLAS mm | vs addmm | rel. err |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        if "median_ms" not in r:
            lines.append(f"| {shape} | {r['variant']} | {r.get('error', 'incorrect')[:60]} | | | |")
            continue
        over = f"{r['over_mm'] * 100:+.1f} %" if "over_mm" in r else ""
        vs = f"{r['vs_addmm_speedup']:.3f}x" if "vs_addmm_speedup" in r else ""
        lines.append(f"| {shape} | {r['variant']} | {r['median_ms'] * 1e3:.1f} ({r['spread_ms'] * 1e3:.1f}) | {over} "
                     f"| {vs} | {r.get('rel_err', float('nan')):.2e} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        print(render(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=("check", "time"), required=True)
    ap.add_argument("--config", default="pp128", help=f"comma-separated names from {', '.join(NAMED)}")
    ap.add_argument("--cases", default="default", choices=("default", "multi_res", "multi_nores", "multi_bias"))
    ap.add_argument("--plain", default="", help="configs also timed without the residual (default: the first)")
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}x{k}" for m, n, k in PREFILL), help="MxNxK,...")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=100.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.configs = [c for c in args.config.split(",") if c]
    args.plain = [c for c in args.plain.split(",") if c]
    unknown = [c for c in args.configs if c not in NAMED]
    if unknown:
        print(f"--config: unknown {unknown}; allowed: {', '.join(NAMED)}", file=sys.stderr)
        return 2
    args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    if not GG.available():
        print(f"gluon kernel unavailable: {GG.unavailable_reason()}", file=sys.stderr)
        return 3
    return phase_check(args) if args.phase == "check" else phase_time(args)


if __name__ == "__main__":
    sys.exit(main())
