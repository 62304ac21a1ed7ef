"""Compilation ahead of timing for lab/benchmarks/gemm_oproj.py (``--precompile N``): every Triton config and
torch.compile graph the run will need, compiled in worker processes that fill Triton's and Inductor's
on-disk caches, so the timed process only loads them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from solkit.kernels.gemm import dispatch as G

#: the script the workers run (its --warm-worker mode)
SCRIPT = Path(__file__).with_name("gemm_oproj.py")
SEED_SHAPE = (8192, 4096, 4096)


def oproj_residual(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The op in eager torch: what the torch.compile row compiles (module level, so a precompile worker
    process compiles the same graph and leaves Inductor's caches warm for the main process)."""
    return x @ w.t() + r


def warm_tasks(args: argparse.Namespace, prefill, decode) -> list[dict[str, Any]]:
    """What this run will compile: every sweep candidate and autotune entry (Triton), and
    torch.compile at each prefill shape of the table; one task each."""
    table = G.load_config_table()
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(cfg: dict[str, Any], residual: bool = True) -> None:
        key = json.dumps([cfg, residual], sort_keys=True)
        if key not in seen:
            seen.add(key)
            tasks.append({"kind": "triton", "config": cfg, "residual": residual})

    for regime in ("prefill", "decode"):
        entry = table["hopper"][regime]
        sweep = args.sweep != "none" and getattr(args, f"sweep_{regime}") != "none"
        for i, cfg in enumerate(entry.get("candidates", []) if sweep else []):
            add({"kernel": entry["kernel"], **cfg})
            if regime == "prefill" and i in (getattr(args, "sweep_plain", None) or []):
                add({"kernel": entry["kernel"], **cfg}, residual=False)
        if args.sweep != "only":
            for cfg in entry["autotune"]:
                cfg = {"kernel": entry["kernel"], **{k: v for k, v in cfg.items() if k not in ("m_min", "m_max")}}
                add(cfg)
                if regime == "prefill" and args.with_plain:
                    add(cfg, residual=False)
    if args.sweep != "only" and not args.no_compile:
        shapes = {"all": prefill, "seed": [s for s in prefill if s == SEED_SHAPE], "none": []}[args.table_prefill]
        if args.compile_seed_only:
            shapes = [s for s in shapes if s == SEED_SHAPE]
        tasks += [{"kind": "compile", "shape": list(s)} for s in shapes]
    elif args.compile_probe:
        tasks.append({"kind": "compile", "shape": list(SEED_SHAPE)})
    return tasks


def warm_worker(tasks: list[dict[str, Any]]) -> int:
    """In a worker process: compile each task by running it once on small inputs with the same
    specialisation (dtype, 16-byte alignment, K a multiple of every BLOCK_K, so EVEN_K holds as at
    the real shapes); Triton's and Inductor's on-disk caches keep the results."""
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dt = torch.bfloat16 if cuda else torch.float16  # the CPU (interpreter) only checks the plumbing
    for task in tasks:
        t0 = time.time()
        try:
            if task["kind"] == "triton":
                cfg = task["config"]
                M = 512 if cfg["kernel"] in G.TMA_KERNELS else 64
                if cfg["kernel"] == "splitk" and cfg["BLOCK_M"] == 1:
                    M = 1
                x = torch.randn(M, 1024, device=dev, dtype=dt)
                w = torch.randn(512, 1024, device=dev, dtype=dt)
                r = torch.randn(M, 512, device=dev, dtype=dt) if task["residual"] else None
                G.gemm(x, w, residual=r, config=cfg)
            else:
                M, N, K = task["shape"]
                x = torch.randn(M, K, device=dev, dtype=dt)
                w = torch.randn(N, K, device=dev, dtype=dt)
                r = torch.randn(M, N, device=dev, dtype=dt)
                torch.compile(oproj_residual, dynamic=False)(x, w, r)
            if cuda:
                torch.cuda.synchronize(dev)
            print(json.dumps({"ok": True, "s": round(time.time() - t0, 2), "task": task}), flush=True)
        except Exception as e:  # noqa: BLE001 - the main process compiles it itself
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}", "task": task}), flush=True)
    return 0


def precompile(tasks: list[dict[str, Any]], workers: int, timeout_s: float) -> dict[str, Any]:
    """Run ``tasks`` in about ``workers`` plain subprocesses (not multiprocessing children, whose Inductor
    cache keys differ); returns wall time and failures. Nothing is timed meanwhile."""
    import subprocess

    t0 = time.time()
    compiles = [t for t in tasks if t["kind"] == "compile"]
    others = [t for t in tasks if t["kind"] != "compile"]
    # each torch.compile task (tens of seconds) in a worker of its own, the Triton tasks spread over the rest
    n_other = max(1, workers - len(compiles)) if others else 0
    shards = [[t] for t in compiles] + [others[k::n_other] for k in range(n_other)]
    shards = [sh for sh in shards if sh]
    n = len(shards)
    procs = []
    for shard in shards:
        cmd = [sys.executable, str(SCRIPT), "--warm-worker", json.dumps(shard)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout_s - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                results.append(json.loads(line))
    failed = [r for r in results if not r.get("ok")]
    return {
        "workers": n,
        "tasks": len(tasks),
        "done": sum(1 for r in results if r.get("ok")),
        "failed": failed[:20],
        "wall_s": round(time.time() - t0, 2),
        "task_s_sum": round(sum(r.get("s", 0.0) for r in results), 2),
    }
