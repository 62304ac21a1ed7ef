"""Record exhaustive tuning sweeps (every config of a declared space) for kernel x shape tasks.

Each task writes ``<out>/<task>.jsonl``: a header line (task, space, device, versions, settings),
then one line per config as soon as it is measured, so a killed job keeps its partial data. The
replay benchmark (lab/benchmarks/tune_replay.py) and ``solkit tune --replay`` read these files.

    python lab/benchmarks/tune_sweeps.py --out DIR [--tasks gemm_M4096,...] [--time-limit 180]
    python lab/benchmarks/tune_sweeps.py --out /tmp/x --quick      # tiny shapes: a CPU smoke test

Compilation runs in a process pool (all tasks are queued at start, in task order, and a binary
shared by several shapes compiles once); benchmarking is serial, with the engine's correctness gate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from solkit.tune.compile_pool import CompilePool, interpreter_mode
from solkit.tune.engine import Evaluator
from solkit.tune.records import BenchSettings


def device_info() -> dict:
    info = {"torch": torch.__version__, "python": platform.python_version(), "host_cpus": os.cpu_count()}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, capability=f"sm_{p.major}{p.minor}", sm_count=p.multi_processor_count,
                    cuda=torch.version.cuda)  # fmt: skip
        from solkit.tune.space import smem_limit

        info["max_shared_mem"] = smem_limit()
    else:
        info.update(name="cpu", interpreter=interpreter_mode())
    return info


def build_tasks(quick: bool, smem: int | None):
    from solkit.tune import bench_kernels as bk

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if quick:  # tiny shapes and spaces for a CPU smoke test through the interpreter
        from solkit.tune.space import Space

        dt_ = torch.float16 if dev == "cpu" else torch.bfloat16
        small_gemm = Space({"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16], "GROUP_M": [2],
                            "num_warps": [4], "num_stages": [2]})  # fmt: skip
        small_row = Space({"BLOCK_N": [32, 64], "ROWS": [1, 2], "num_warps": [1], "num_stages": [1]})
        small_ce = Space({"BLOCK_V": [64, 128], "num_warps": [1], "num_stages": [1, 2]})
        return [
            ("gemm_quick", bk.make_gemm_problem(48, 32, 48, dt_, dev), small_gemm),
            ("rmsnorm_quick", bk.make_rmsnorm_problem(5, 100, dt_, dev), small_row),
            ("softmax_quick", bk.make_softmax_problem(5, 100, dt_, dev), small_row),
            ("cross_entropy_quick", bk.make_cross_entropy_problem(4, 200, dt_, dev), small_ce),
        ]
    gemm = bk.gemm_space(smem)
    b = torch.bfloat16
    # Tasks of one kernel are spread out so that their shared binaries finish compiling before the
    # next shape asks for them.
    return [
        ("gemm_bf16_M4096_N4096_K4096", bk.make_gemm_problem(4096, 4096, 4096, b), gemm),
        ("rmsnorm_bf16_8192x4096", bk.make_rmsnorm_problem(8192, 4096, b), bk.row_space(4096, "rmsnorm")),
        ("softmax_bf16_8192x4096", bk.make_softmax_problem(8192, 4096, b), bk.row_space(4096, "softmax")),
        ("cross_entropy_bf16_4096x32000", bk.make_cross_entropy_problem(4096, 32000, b), bk.cross_entropy_space()),
        ("gemm_bf16_M128_N4096_K4096", bk.make_gemm_problem(128, 4096, 4096, b), gemm),
        ("gemm_bf16_M1024_N4096_K4096", bk.make_gemm_problem(1024, 4096, 4096, b), gemm),
        ("gemm_bf16_M8192_N4096_K4096", bk.make_gemm_problem(8192, 4096, 4096, b), gemm),
        ("rmsnorm_bf16_16384x1024", bk.make_rmsnorm_problem(16384, 1024, b), bk.row_space(4096, "rmsnorm")),
        ("softmax_bf16_1024x32768", bk.make_softmax_problem(1024, 32768, b), bk.row_space(16384, "softmax")),
        ("cross_entropy_bf16_1024x128256", bk.make_cross_entropy_problem(1024, 128256, b), bk.cross_entropy_space()),
        ("rmsnorm_bf16_2048x8192", bk.make_rmsnorm_problem(2048, 8192, b), bk.row_space(8192, "rmsnorm")),
    ]


def self_test(pool: CompilePool, tasks) -> bool:
    """Compile one small config through the pool; False (and why) if the pool cannot compile here."""
    name, problem, space = next((t for t in tasks if "rmsnorm" in t[0]), tasks[0])
    cfg = space.configs[0] if len(space.configs) else space.product()[0]
    t0 = time.perf_counter()
    res = pool.result(pool.submit(problem.compile_job(cfg)))
    print(f"pool self-test on {name} {cfg}: {res} ({time.perf_counter() - t0:.1f}s)", flush=True)
    return res["status"] == "ok"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (CPU smoke test)")
    ap.add_argument("--time-limit", type=float, default=1e9, help="stop benchmarking after this many seconds")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    pool = CompilePool(args.workers) if torch.cuda.is_available() and not interpreter_mode() else None
    if pool is not None:
        pool.start()  # workers import torch/triton while this process builds inputs
    info = device_info()
    smem = info.get("max_shared_mem")
    tasks = build_tasks(args.quick, smem)
    if pool is not None and not self_test(pool, tasks):
        pool.close()
        pool = None  # compile lazily in this process instead: slower, but the sweep still runs
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t[0] in wanted]
    settings = BenchSettings(reps=args.reps, trials=2, warmup=2, screen_reps=3, screen_factor=2.5, input_sets=2)
    evaluators = []
    for name, problem, space in tasks:
        configs = space.candidates()  # the pre-filter is not applied: the sweep records the ground truth
        ev = Evaluator(problem, pool=pool, settings=settings)
        ev.prefetch(configs)
        evaluators.append((name, problem, space, configs, ev))
    print(f"[{time.perf_counter() - t_start:6.1f}s] queued {sum(len(e[3]) for e in evaluators)} configs "
          f"over {len(evaluators)} tasks", flush=True)  # fmt: skip
    summary = []
    for name, problem, space, configs, ev in evaluators:
        if time.perf_counter() - t_start > args.time_limit:
            print(f"time limit reached before {name}", flush=True)
            break
        header = {
            "kind": "header", "task": name, "problem": problem.name, "meta": problem.meta,
            "flops": problem.flops, "bytes": problem.bytes_moved, "space": space.to_dict(),
            "device": info, "settings": settings.__dict__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        }  # fmt: skip
        path = out / f"{name}.jsonl"
        t_task = time.perf_counter()
        n_ok = 0
        best = None
        with path.open("w") as fh:
            fh.write(json.dumps(header) + "\n")
            fh.flush()
            for cfg in configs:
                if time.perf_counter() - t_start > args.time_limit:
                    break
                rec = ev.evaluate([cfg])[0].to_dict()
                reason = space.check(cfg) if smem else None
                if reason:
                    rec["prefilter"] = reason
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
                fh.flush()
                if rec["status"] == "ok":
                    n_ok += 1
                    if best is None or rec["time_ms"] < best["time_ms"]:
                        best = rec
        statuses: dict[str, int] = {}
        for r in ev.records.values():
            statuses[r.status] = statuses.get(r.status, 0) + 1
        line = {"task": name, "configs": len(ev.records), "ok": n_ok, "statuses": statuses,
                "best_ms": best and best["time_ms"], "best": best and best["config"],
                "seconds": round(time.perf_counter() - t_task, 1)}  # fmt: skip
        summary.append(line)
        print(f"[{time.perf_counter() - t_start:6.1f}s] {json.dumps(line)}", flush=True)
        del ev
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    (out / "summary.json").write_text(json.dumps({"device": info, "tasks": summary}, indent=1))
    if pool is not None:
        pool.close()
    print(f"done in {time.perf_counter() - t_start:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
