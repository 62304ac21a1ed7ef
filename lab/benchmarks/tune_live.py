"""Live comparison on the GPU: solkit.tune (default strategy and budget) vs triton.autotune, one GEMM shape.

Each side runs in its own fresh process with its own empty Triton cache, so both pay cold compiles:

    python lab/benchmarks/tune_live.py ours   --out DIR [--warm SWEEP_DIR]   # solkit.tune.tune(...)
    python lab/benchmarks/tune_live.py triton --out DIR                      # @triton.autotune over the same list
    python lab/benchmarks/tune_live.py compare --out DIR                     # re-time both winners, same protocol

"The same config list" is :func:`live_space`: 72 configs of the sweep's GEMM space (BLOCK_M, BLOCK_N
in {64, 128, 256}, BLOCK_K in {32, 64}, num_warps in {4, 8}, num_stages in {3, 4}; sized so that the
serial triton.autotune run fits the GPU job's time cap). triton.autotune gets all 72; solkit.tune
searches the same list (its shared-memory pre-filter removes the configs that cannot fit) with
its default strategy and budget. The triton side logs each config as its benchmark finishes, so a
run cut short by the cap still gives a measured lower bound on its time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

T_PROCESS = time.perf_counter()

# SOLKIT_LIVE_MNK=64,32,64 shrinks the shape for a CPU smoke test through the interpreter
M, N, K = (int(x) for x in os.environ.get("SOLKIT_LIVE_MNK", "4096,4096,4096").split(","))


def _write(out: Path, name: str, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(data, indent=1, default=str))
    print(json.dumps({k: v for k, v in data.items() if k not in ("evaluations", "timings")}, default=str), flush=True)


def live_space(smem: int | None):
    from solkit.tune.space import Space, gemm_smem_bytes

    return Space(
        {
            "BLOCK_M": [64, 128, 256],
            "BLOCK_N": [64, 128, 256],
            "BLOCK_K": [32, 64],
            "GROUP_M": [8],
            "num_warps": [4, 8],
            "num_stages": [3, 4],
        },  # fmt: skip
        smem_bytes=gemm_smem_bytes(2),
        smem_limit_bytes=smem,
        name="gemm_live",
    )


def run_ours(out: Path, warm_dir: str | None, tag: str) -> None:
    import torch

    from solkit.tune import bench_kernels as bk
    from solkit.tune.replay import load_landscapes
    from solkit.tune.space import smem_limit
    from solkit.tune.strategies import DEFAULT_BUDGET, DEFAULT_STRATEGY, Prior
    from solkit.tune.tuner import tune

    t_import = time.perf_counter() - T_PROCESS
    t0 = time.perf_counter()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    problem = bk.make_gemm_problem(M, N, K, torch.bfloat16 if dev == "cuda" else torch.float16, dev)
    space = live_space(smem_limit())
    prior = None
    if warm_dir:  # other GEMM shapes recorded earlier (never this shape): the warm start
        lands = [la for la in load_landscapes([warm_dir]) if la.kernel == "gemm" and f"_M{M}_" not in la.name]
        prior = Prior.from_times([la.times for la in lands])
    res = tune(problem, space, prior=prior, warm_start=prior is not None)
    wall = time.perf_counter() - t0
    data = {"side": f"solkit.tune ({tag})", "strategy": DEFAULT_STRATEGY, "budget": DEFAULT_BUDGET,
            "tune_wall_s": wall, "process_import_s": t_import, "process_wall_s": time.perf_counter() - T_PROCESS,
            "best": res.best, "best_ms": res.best_ms, "space_size": res.space_size,
            "pruned_by_prefilter": res.pruned, "statuses": res.statuses,
            "warm_start_tasks": len(prior.tasks) if prior else 0, "evaluations": res.evaluations}  # fmt: skip
    _write(out, f"ours_{tag}.json", data)


def run_triton(out: Path) -> None:
    import torch
    import triton

    from solkit.tune import bench_kernels as bk

    t_import = time.perf_counter() - T_PROCESS
    out.mkdir(parents=True, exist_ok=True)
    space = live_space(None)  # the whole list: triton.autotune has no pre-filter
    configs = []
    for c in space.configs:
        meta, launch = space.split(c)
        configs.append(triton.Config(meta, num_warps=launch["num_warps"], num_stages=launch["num_stages"]))
    progress = (out / "triton_progress.jsonl").open("w")
    t_first: list[float] = []

    def logged_bench(kernel_call, quantiles):  # the autotuner's default benchmarker, with a progress log
        t = triton.testing.do_bench(kernel_call, quantiles=quantiles)
        progress.write(json.dumps({"t_s": time.perf_counter() - t_first[0], "ms": t}) + "\n")
        progress.flush()
        return t

    tuned = triton.autotune(configs=configs, key=["M", "N", "K"], do_bench=logged_bench)(bk.matmul_kernel)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16) / K**0.5
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    t_first.append(t0)
    tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    best = tuned.best_config
    best_cfg = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    timings = {}
    for k, v in (getattr(tuned, "configs_timings", None) or {}).items():
        vals = v if isinstance(v, (list, tuple)) else [v]
        key = json.dumps({**k.kwargs, "num_warps": k.num_warps, "num_stages": k.num_stages})
        timings[key] = [x if x == x and abs(x) != float("inf") else None for x in map(float, vals)]  # inf: failed
    data = {"side": "triton.autotune", "configs": len(configs), "tune_wall_s": wall, "process_import_s": t_import,
            "autotuner_bench_time_s": getattr(tuned, "bench_time", None), "best": best_cfg,
            "best_ms_do_bench": min((v[0] for v in timings.values() if v[0] is not None), default=None),
            "failed_configs": sum(v[0] is None for v in timings.values()),
            "timings": timings}  # fmt: skip
    _write(out, "triton.json", data)
    progress.close()


def run_compare(out: Path) -> None:
    """Re-time both winners with the harness protocol, interleaved A/B/A/B, fresh inputs."""
    import torch

    from solkit.timing import benchmark
    from solkit.tune import bench_kernels as bk

    problem = bk.make_gemm_problem(M, N, K, torch.bfloat16)
    inputs = [problem.make_inputs(50 + i) for i in range(3)]
    sides = {}
    for name in sorted(p.name for p in out.glob("*.json") if p.name.startswith(("ours_", "triton"))):
        data = json.loads((out / name).read_text())
        if data.get("best"):
            sides[name.removesuffix(".json")] = data["best"]
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _round in range(3):
        for name, cfg in sides.items():
            res = benchmark(lambda *inp, cfg=cfg: problem.run(cfg, inp), inputs, reps=100, trials=3, warmup=10)
            times[name].append(res.median_ms)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    ref = med.get("triton")
    flops = 2.0 * M * N * K
    cublas = benchmark(lambda a, b, c: torch.matmul(a, b, out=c), inputs, reps=100, trials=3, warmup=10).median_ms
    data = {"shape": [M, N, K], "dtype": "bf16", "winners": sides, "median_ms": med, "rounds_ms": times,
            "fraction_of_triton_autotune": {k: (ref / v if ref else None) for k, v in med.items()},
            "tflops": {k: flops / (v * 1e-3) / 1e12 for k, v in med.items()}, "cublas_ms": cublas,
            "device": torch.cuda.get_device_name(0),
            "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__,
                         "cuda": torch.version.cuda}}  # fmt: skip
    _write(out, "compare.json", data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=["ours", "triton", "compare"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--warm", default=None, help="directory of sweep files of other shapes (warm start)")
    ap.add_argument("--tag", default="cold")
    args = ap.parse_args()
    out = Path(args.out)
    if args.side == "ours":
        run_ours(out, args.warm, args.tag)
    elif args.side == "triton":
        run_triton(out)
        run_compare(out)  # same process: saves an interpreter start under the job's time cap
    else:
        run_compare(out)
    print(f"{args.side}: process wall {time.perf_counter() - T_PROCESS:.1f}s (TRITON_CACHE_DIR="
          f"{os.environ.get('TRITON_CACHE_DIR')})", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
