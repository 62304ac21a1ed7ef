#!/usr/bin/env python3
# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""The o_proj + residual case study: ``y = x @ W.T + residual``, fused Triton GEMM against cuBLAS.

Rows per shape (bf16): matmul alone (cuBLAS, x @ W.T: the floor a fused kernel should reach),
before (matmul, then add: two kernels), after (solkit's fused GEMM, autotuned), cuBLAS addmm
(beta=1) and torch.compile. Columns: the harness's median (L2 flushed, rotating inputs), TFLOP/s,
SOL fraction on the spec and the calibrated basis, MFU on both. T_SOL is that of the full op:
2*M*N*K FLOPs and (M*K + N*K + 2*M*N) * 2 bytes (x, W and the residual read once, y written once).

Calibration in the same job and with the same timer: a bf16 cuBLAS GEMM 8192^3 and a 2 GiB copy.
Every variant's output is checked against an fp32 reference (relative Frobenius error at most
2x cuBLAS addmm's own + 1e-3); a failing variant is a row with its error, never a crash.

    python lab/benchmarks/gemm_oproj.py --out $OUT/gemm_oproj.json [--sweep] [--budget-s 120]
    python lab/benchmarks/gemm_oproj.py --quick        # CPU smoke run through the Triton interpreter
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if "--quick" in sys.argv and not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from gemm_oproj_compile import SEED_SHAPE, oproj_residual, precompile, warm_tasks, warm_worker  # noqa: E402
from gemm_oproj_report import print_table, render_markdown, render_sweep_markdown  # noqa: E402
from gemm_oproj_sweep import kernel_names, sweep  # noqa: E402

from solkit.kernels.gemm import dispatch as G  # noqa: E402
from solkit.sol.model import Ceilings, mfu, sol_fraction, t_sol  # noqa: E402
from solkit.timing import benchmark as _harness_benchmark  # noqa: E402

SPEC_FALLBACK = {"bf16_tensor": 989.4e12, "bandwidth": 4.8e12}  # the H200 datasheet, if the DB lookup fails
PREFILL = [(4096, 4096, 4096), (8192, 4096, 4096), (16384, 4096, 4096), (8192, 8192, 8192)]  # (M, N, K)
DECODE = [(m, k, k) for k in (4096, 8192) for m in (1, 16, 64)]
QUICK_PREFILL = [(130, 96, 64)]
QUICK_DECODE = [(1, 48, 64), (16, 48, 64)]


_FLUSH_KW = "l2_flush_mode" in inspect.signature(_harness_benchmark).parameters
L2_FLUSH = {"mode": "read"}  # set from --l2-flush in main()


def benchmark(fn, pool, **kw):
    """The harness's benchmark, with the chosen L2 flush ("read" leaves clean lines, so a call is not
    charged for the write-back of the flush's dirty lines) where the harness supports it."""
    if _FLUSH_KW:
        kw["l2_flush_mode"] = L2_FLUSH["mode"]
    return _harness_benchmark(fn, pool, **kw)


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.time()
        # an explicit index: torch.cuda.set_device (used by the harness) rejects a bare "cuda"
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        )
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float16
        self.doc: dict[str, Any] = {
            "benchmark": "gemm_oproj",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "device": self._device_info(),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "triton": triton.__version__,
                "cuda": torch.version.cuda,
            },
            "dtype": str(self.dtype).replace("torch.", ""),
            "timing": {
                "harness": "solkit.harness.timing.benchmark",
                "method": args.method,
                "l2_flushed": True,
                "l2_flush_mode": args.l2_flush if _FLUSH_KW else "write (harness default; no mode option)",
                "samples_per_trial": args.reps,
                "trials": args.trials,
                "protocol": "variants of one shape timed in interleaved round-robin trials (order reversed every "
                "other trial) so power-cap throttling hits them alike; the row's time is the median of its "
                "trial medians. method 'auto' (the harness's median, solkit eval's protocol): calls under "
                "100 us are timed as graph_events (10 calls per CUDA graph, each preceded by an L2 flush, "
                "CUDA events captured as graph nodes around every call: no launch gaps, no subtraction), "
                "longer calls with CUDA events per call (GPU spin ahead of the start event, so the host "
                "launch is hidden). L2 flush 'read': a read sweep of 2x L2 that leaves clean lines. Each "
                "row's timing.method says which timer ran.",
            },
            "ceilings": {},
            "rows": [],
            "sweep": [],
            "skipped": [],
        }
        self.spec: Ceilings | None = None
        self.last_fused_config: dict[str, Any] | None = None
        self.cal: Ceilings | None = None
        self._compiled_once = False

    # ------------------------------------------------------------------ helpers
    def _device_info(self) -> dict[str, Any]:
        if self.device.type != "cuda":
            return {"name": "cpu (Triton interpreter)", "kind": "cpu"}
        p = torch.cuda.get_device_properties(self.device)
        return {
            "name": p.name,
            "capability": list(torch.cuda.get_device_capability(self.device)),
            "sm_count": p.multi_processor_count,
            "memory_bytes": p.total_memory,
        }

    def gpu_state(self, when: str) -> None:
        """Clocks, power and temperature from nvidia-smi (context for power-capped GEMM numbers)."""
        import subprocess

        q = "clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            out = f"unavailable: {e}"
        self.doc.setdefault("gpu_state", {})[when] = {"query": q, "value": out}

    def left(self) -> float:
        return self.args.budget_s - (time.time() - self.t0)

    def save(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        tmp.replace(out)

    def log(self, msg: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {msg}", flush=True)

    def timed(self, fn, pool, reps: int | None = None, trials: int = 3) -> dict[str, Any]:
        """One benchmark call (calibration); rows go through :meth:`interleave`."""
        r = benchmark(
            fn, pool, method=self.args.method, reps=reps or self.args.reps, trials=trials, warmup=3, device=self.device
        )
        return r.to_dict()

    # ------------------------------------------------------------------ ceilings
    def calibrate(self) -> None:
        spec_note = "solkit.sol.ceilings.get_ceilings(basis='spec')"
        try:
            from solkit.sol.ceilings import get_ceilings

            spec = get_ceilings(basis="spec")
            spec = Ceilings(spec.arch, "spec", {"bf16_tensor": spec.peak("bf16_tensor")}, spec.bandwidth)
        except Exception as e:  # noqa: BLE001 - an unknown device still gets the issue's H200 numbers, labelled
            spec_note = f"fallback H200 datasheet numbers ({type(e).__name__}: {e})"
            spec = Ceilings(
                "h200-sxm", "spec", {"bf16_tensor": SPEC_FALLBACK["bf16_tensor"]}, SPEC_FALLBACK["bandwidth"]
            )
        self.spec = spec
        self.doc["ceilings"]["spec"] = {**spec.to_dict(), "source": spec_note}
        if self.device.type != "cuda":
            self.cal = spec
            self.doc["ceilings"]["calibrated"] = {**spec.to_dict(), "source": "cpu: spec reused"}
            return
        n = 8192
        self.heat()  # the ceiling at the power-capped steady state every timed row below also runs in
        a = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)
        g = self.timed(lambda a, b: torch.mm(a, b), [(a, b)], reps=30, trials=2)
        del a, b
        # 1 GiB per buffer, 2 GiB moved. A 2 GiB buffer (2^31 bytes) runs ~35 % slower through
        # torch's copy (2.72 against 4.25 TB/s, benchmarks/results/gemm/2026-11-30_h200_oproj_0337.json), a wrong ceiling.
        nbytes = 2**30
        src = torch.randn(nbytes // 2, device=self.device, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        c = self.timed(lambda s, d: d.copy_(s), [(src, dst)], reps=20, trials=2)
        del src, dst
        flops = 2 * n**3 / (g["median_ms"] * 1e-3)
        bw = 2 * nbytes / (c["median_ms"] * 1e-3)
        self.cal = Ceilings(spec.arch, "calibrated", {"bf16_tensor": flops}, bw)
        self.doc["ceilings"]["calibrated"] = {
            **self.cal.to_dict(),
            "source": "measured in this job after 0.3 s of GEMM warm-up (power-capped steady state), same timer as "
            "the rows: bf16 torch.mm 8192^3 and a copy of a 1 GiB buffer (bytes read + written)",
            "gemm_timing": g,
            "copy_timing": c,
        }
        # The timer's floor: a one-block kernel (64 bytes written) under the same protocol. What a decode
        # row can never go below, whatever it moves.
        tiny = torch.empty(16, device=self.device, dtype=torch.float32)
        floor = self.timed(lambda t: t.fill_(1.0), [(tiny,)], reps=60, trials=2)
        self.doc["ceilings"]["timer_floor"] = {"what": "torch fill_ of 16 floats (one tiny kernel)", **floor}
        self.log(f"calibrated: {flops / 1e12:.0f} TFLOP/s bf16, {bw / 1e12:.2f} TB/s copy; "
                 f"one-kernel floor {floor['median_ms'] * 1e3:.2f} us ({floor['method']})")  # fmt: skip
        self.save()

    # ------------------------------------------------------------------ one shape
    def inputs(self, M: int, N: int, K: int, sets: int):
        gen = torch.Generator(device=self.device).manual_seed(M * 31 + N * 7 + K)
        w = torch.randn(N, K, device=self.device, dtype=self.dtype, generator=gen) / K**0.5
        pool = []
        for _ in range(sets):
            x = torch.randn(M, K, device=self.device, dtype=self.dtype, generator=gen)
            r = torch.randn(M, N, device=self.device, dtype=self.dtype, generator=gen)
            pool.append((x, w, r))
        return pool

    def sol_columns(self, M: int, N: int, K: int, ms: float) -> dict[str, Any]:
        flops = 2.0 * M * N * K
        nbytes = 2.0 * (M * K + N * K + 2 * M * N)
        cols: dict[str, Any] = {"tflops": flops / (ms * 1e-3) / 1e12}
        for basis, ceil in (("spec", self.spec), ("calibrated", self.cal)):
            sol = t_sol({"bf16_tensor": flops}, nbytes, ceil)
            score = sol_fraction(sol.t_sol_s, ms * 1e-3)
            cols[f"t_sol_ms_{basis}"] = sol.t_sol_ms
            cols[f"bound_{basis}"] = sol.bound
            cols[f"sol_{basis}"] = score.sol_fraction
            cols[f"sol_violation_{basis}"] = score.violation
            cols[f"mfu_{basis}"] = mfu(flops, ms * 1e-3, ceil.peak("bf16_tensor"))
            cols[f"bw_util_{basis}"] = nbytes / (ms * 1e-3) / ceil.bandwidth
        return cols

    def check(self, fn, args, with_residual: bool, ref_full, ref_mm, torch_err: float) -> dict[str, Any]:
        out = fn(*args)
        ref = ref_full if with_residual else ref_mm
        err = ((out.float() - ref).norm() / ref.norm()).item()
        allowed = 2 * torch_err + 1e-3
        ok = bool(torch.isfinite(out).all().item()) and err <= allowed
        return {"rel_err": err, "allowed_rel_err": allowed, "correct": ok}

    def variants(
        self, M: int, N: int, K: int, decode: bool, only: str | tuple | None, with_compile: bool = False
    ) -> list[tuple[str, Any, bool]]:
        def fused(x, w, r):
            return G.gemm(x, w, residual=r)

        rows = [
            ("matmul alone (cuBLAS x @ W.T)", lambda x, w, r: torch.matmul(x, w.t()), False),
            ("before: matmul, then add", lambda x, w, r: torch.matmul(x, w.t()) + r, True),
            ("after: solkit fused GEMM", fused, True),
            ("cuBLAS addmm (beta=1)", lambda x, w, r: torch.addmm(r, x, w.t()), True),
        ]
        if self.args.with_plain and not decode:
            # the fused row's winning config without the residual: the epilogue's cost, one compile
            def plain(x, w, r):
                return G.gemm(x, w, config=self.last_fused_config)

            rows.append(("solkit GEMM alone (same config)", plain, False))
        want_compile = not self.args.no_compile and self.device.type == "cuda"
        if want_compile and (with_compile or (only is not None and "torch.compile" in only)):
            # one compiled function per shape (dynamic=False): the code inductor emits for exactly it
            compiled = torch.compile(oproj_residual, dynamic=False)
            rows.append(("torch.compile (x @ W.T + r)", compiled, True))
        return [r for r in rows if only is None or r[0].startswith(only)]

    def host_cost(self, fn, args, calls: int = 20) -> float:
        """CPU time to enqueue one call (no sync in between): the launcher's overhead, which CUDA
        graphs remove from the timed rows but an eager caller pays."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        host = (time.perf_counter() - t0) / calls * 1e6
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return host

    def heat(self, seconds: float = 0.3) -> None:
        """Run bf16 GEMMs for a while, so that what follows (autotuning, which times configs one after
        another) starts at the power-capped steady state instead of favouring whatever runs first."""
        if self.device.type != "cuda":
            return
        if not hasattr(self, "_heat_ab"):
            self._heat_ab = [torch.randn(8192, 8192, device=self.device, dtype=torch.bfloat16) for _ in range(2)]
        a, b = self._heat_ab
        t0 = time.time()
        while time.time() - t0 < seconds:
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize(self.device)

    def interleave(self, fns: dict[str, Any], pool, trials: int, reps: int) -> dict[str, dict[str, Any]]:
        """Time callables in round-robin trials (A B C, C B A, A B C, ...), so power-cap throttling and
        clock drift hit them alike; per name: the median of the trial medians, their spread, the trials."""
        out: dict[str, dict[str, Any]] = {name: {"trials": []} for name in fns}
        names = list(fns)
        for t in range(trials):
            if t and self.left() < 5:
                break
            for name in names if t % 2 == 0 else names[::-1]:
                if "error" in out[name]:
                    continue
                try:
                    wall_start = time.time()
                    r = benchmark(
                        fns[name], pool, method=self.args.method, reps=reps, trials=1, warmup=1, device=self.device
                    )
                    # wall-clock span of the trial: to line it up with a clock/power log (nvidia-smi -lms)
                    out[name]["trials"].append({**r.to_dict(), "wall_start": wall_start, "wall_end": time.time()})
                except Exception as e:  # noqa: BLE001 - a failing variant is reported, the others go on
                    out[name]["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        for d in out.values():
            meds = [t["median_ms"] for t in d["trials"]]
            if meds:
                d.update(
                    median_ms=statistics.median(meds),
                    trial_medians_ms=meds,
                    spread_ms=max(meds) - min(meds),
                    method=d["trials"][0]["method"],
                    samples=sum(t["reps"] * t["trials"] for t in d["trials"]),
                )
        return out

    def shape(
        self, M: int, N: int, K: int, decode: bool, only: str | tuple | None = None, with_compile: bool = False
    ) -> None:
        variants = self.variants(M, N, K, decode, only, with_compile)
        if not variants:
            return
        pool = self.inputs(M, N, K, 4 if decode else 2)
        x, w, r = pool[0]
        ref_mm = x.float() @ w.float().t()
        ref_full = ref_mm + r.float()
        torch_out = torch.addmm(r, x, w.t())
        torch_err = ((torch_out.float() - ref_full).norm() / ref_full.norm()).item()
        del torch_out
        rows: dict[str, dict[str, Any]] = {}
        fns: dict[str, Any] = {}
        self.heat()
        for name, fn, with_res in variants:  # correctness first (also compiles and autotunes)
            need = (6 if self._compiled_once else self.args.compile_reserve_s) if "compile" in name else 3
            if self.left() < need:
                self.doc["skipped"].append({"shape": [M, N, K], "variant": name, "why": "time budget"})
                continue
            row: dict[str, Any] = {"M": M, "N": N, "K": K, "regime": "decode" if decode else "prefill", "variant": name}
            rows[name] = row
            try:
                t_start = time.time()
                row.update(self.check(fn, pool[0], with_res, ref_full, ref_mm, torch_err))
                row["first_call_s"] = time.time() - t_start
                if "compile" in name:
                    self._compiled_once = True
                row["host_us_per_call"] = self.host_cost(fn, pool[0])
                if name.startswith("after") or name.startswith("solkit"):
                    row["launch"] = json.loads(json.dumps(G.LAST_LAUNCH, default=str))
                    if name.startswith("after"):
                        self.last_fused_config = {"kernel": G.LAST_LAUNCH["kernel"], **G.LAST_LAUNCH["config"]}
                fns[name] = fn
            except Exception as e:  # noqa: BLE001 - a failing variant is a row with its error
                row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                row["traceback"] = traceback.format_exc()[-2000:]
        self.heat()
        timings = self.interleave(fns, pool, self.args.trials, self.args.reps)
        if decode and self.args.kernel_time and self.device.type == "cuda":
            self.kernel_spans(M, N, K, fns, pool, rows)
        for name, row in rows.items():
            t = timings.get(name, {})
            if "error" in t:
                row["error"] = t["error"]
            if "median_ms" in t:
                row["timing"] = t
                row["median_ms"] = t["median_ms"]
                row.update(self.sol_columns(M, N, K, t["median_ms"]))
            self.doc["rows"].append(row)
            ms = row.get("median_ms")
            self.log(f"{M}x{N}x{K} {name:34s} {f'{ms:.4f} ms' if ms else row.get('error', '?')[:80]}")
        del pool, ref_mm, ref_full
        self.save()

    def kernel_spans(self, M, N, K, fns, pool, rows) -> None:
        """Secondary numbers for decode rows: the GPU kernels' own span per call from the CUDA profiler
        (the harness's "kernel" method, what Nsight Compute reports), next to the row's harness median
        that includes the launch inside the graph (the timer floor, ceilings.timer_floor)."""
        for name, fn in fns.items():
            if self.left() < 3:
                break
            try:
                r = benchmark(fn, pool, method="kernel", reps=40, trials=1, warmup=2, device=self.device)
                span = r.median_ms
                nbytes = 2.0 * (M * K + N * K + 2 * M * N)
                sol = t_sol({"bf16_tensor": 2.0 * M * N * K}, nbytes, self.cal)
                rows[name]["kernel_span"] = {
                    "median_ms": span,
                    "busy_ms": r.busy_ms,
                    "method": r.method,
                    "samples": r.reps * r.trials,
                    "sol_calibrated": sol_fraction(sol.t_sol_s, span * 1e-3).sol_fraction,
                }
            except Exception as e:  # noqa: BLE001 - secondary numbers; the row stands without them
                rows[name]["kernel_span"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="benchmarks/results/gemm_oproj.json")
    p.add_argument(
        "--sweep",
        choices=["none", "first", "last", "only"],
        default="none",
        help="time every candidate config of gemm/configs.yaml before or after the table (or alone)",
    )
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row")
    p.add_argument(
        "--table-prefill", choices=["all", "seed", "none"], default="all", help="prefill shapes of the table"
    )
    p.add_argument("--precompile", type=int, default=0, help="compile everything first in this many processes")
    p.add_argument("--precompile-timeout-s", type=float, default=60)
    p.add_argument("--warm-worker", metavar="JSON", help=argparse.SUPPRESS)
    p.add_argument("--compile-probe", action="store_true", help="at the end: torch.compile alone at the seed's shape")
    p.add_argument("--compile-seed-only", action="store_true", help="torch.compile at the seed's shape only")
    p.add_argument("--kernel-time", action="store_true", help="decode rows: also the CUDA profiler's kernel span")
    p.add_argument("--with-plain", action="store_true", help="add solkit's GEMM without the epilogue")
    p.add_argument("--no-decode", action="store_true")
    p.add_argument("--reps", type=int, default=60, help="timed calls (samples) per trial")
    p.add_argument("--trials", type=int, default=5, help="interleaved trials per variant in the table")
    p.add_argument("--sweep-trials", type=int, default=3)
    p.add_argument(
        "--sweep-plain",
        type=lambda v: [int(i) for i in v.split(",") if i],
        default=[],
        help="prefill candidates (indexes, comma-separated) also swept without the residual",
    )
    p.add_argument(
        "--method",
        default="auto",
        choices=["auto", "graph_events", "events", "graph", "kernel"],
        help="harness timing method (auto: graph_events under 100 us, events above)",
    )
    p.add_argument(
        "--compile-reserve-s", type=float, default=30, help="start the first torch.compile only with this much left"
    )
    p.add_argument(
        "--sweep-prefill",
        choices=["none", "seed", "two", "unmet", "all"],
        default="seed",
        help="prefill shapes the sweep covers (two: the seed's and twice its M; unmet: 4096^3 and the seed's)",
    )
    p.add_argument(
        "--sweep-decode", choices=["none", "two", "all"], default="two", help="decode shapes the sweep covers"
    )
    p.add_argument(
        "--sweep-decode-first", action="store_true", help="sweep decode before prefill (most promising first)"
    )
    p.add_argument(
        "--kernel-names",
        action="store_true",
        help="record the CUDA kernels (names, profiler durations) cuBLAS and solkit launch per decode shape",
    )
    p.add_argument("--budget-s", type=float, default=1e9, help="skip what would start after this many seconds")
    p.add_argument("--quick", action="store_true", help="tiny shapes (CPU smoke run)")
    p.add_argument("--l2-flush", default="read", choices=["read", "write"], help="harness L2 flush between calls")
    p.add_argument("--render", metavar="JSON", help="print a result JSON as a markdown table and exit")
    p.add_argument("--calibration", metavar="JSON", help="with --render: take the copy bandwidth from this file")
    p.add_argument("--render-sweep", metavar="JSON", help="print a result JSON's prefill sweep as markdown and exit")
    args = p.parse_args()
    if args.warm_worker:
        return warm_worker(json.loads(args.warm_worker))
    if args.render_sweep:
        print(render_sweep_markdown(args.render_sweep))
        return 0
    if args.render:
        print(render_markdown(args.render, args.calibration))
        return 0
    L2_FLUSH["mode"] = args.l2_flush
    run = Run(args)
    prefill = QUICK_PREFILL if args.quick else PREFILL
    decode = QUICK_DECODE if args.quick else DECODE
    if args.quick:
        args.reps = min(args.reps, 3)
    run.log(f"device {run.doc['device']['name']}, torch {torch.__version__}, triton {triton.__version__}")
    if run.device.type == "cuda":
        run.gpu_state("start")
    if args.precompile > 0 and run.device.type == "cuda":
        summary = precompile(warm_tasks(args, prefill, decode), args.precompile, args.precompile_timeout_s)
        run.doc["precompile"] = summary
        n_failed = len(summary["failed"])
        run.log(f"precompiled {summary['done']}/{summary['tasks']} in {summary['wall_s']} s "
                f"({summary['workers']} workers, {summary['task_s_sum']} s of tasks; {n_failed} failed)")  # fmt: skip
    run.calibrate()

    def sweeps() -> None:
        seed = [s for s in prefill if s == SEED_SHAPE] or prefill[:1]
        two_pre = seed + [s for s in prefill if s[0] == 2 * SEED_SHAPE[0] and s[1:] == SEED_SHAPE[1:]]
        unmet = [s for s in prefill if s[1:] == SEED_SHAPE[1:] and s[0] <= SEED_SHAPE[0]]  # 4096^3, 8192x4096^2
        pre = {"none": [], "seed": seed, "two": two_pre, "unmet": unmet, "all": prefill}[args.sweep_prefill]
        two = [s for s in decode if s in ((1, 4096, 4096), (16, 8192, 8192))] or decode[:1]
        dec = {"none": [], "two": two, "all": decode}[args.sweep_decode]
        order = [(dec, "decode"), (pre, "prefill")] if args.sweep_decode_first else [(pre, "prefill"), (dec, "decode")]
        for shapes, regime in order:
            sweep(run, shapes, regime)

    if args.kernel_names:
        kernel_names(run, decode + [s for s in prefill if s == SEED_SHAPE])
    if args.sweep in ("first", "only"):
        sweeps()
    if args.sweep != "only":
        table_prefill = {"all": prefill, "seed": [s for s in prefill if s == SEED_SHAPE], "none": []}
        for M, N, K in table_prefill[args.table_prefill]:
            # torch.compile interleaved with the other rows of its shape (its first call compiles)
            run.shape(M, N, K, decode=False, with_compile=not args.compile_seed_only or (M, N, K) == SEED_SHAPE)
        if not args.no_decode:
            for M, N, K in decode:
                run.shape(M, N, K, decode=True)
    if args.sweep == "last":
        sweeps()
    if args.compile_probe:  # the torch.compile row alone at the seed's shape (compile time, correctness)
        probe = [s for s in prefill if s == SEED_SHAPE] or prefill[:1]
        run.shape(*probe[0], decode=False, only=("torch.compile", "cuBLAS addmm"))
    if run.device.type == "cuda":
        run.gpu_state("end")
    run.doc["wall_s"] = time.time() - run.t0
    run.save()
    print_table(run.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
