"""The GEMM's config selection through solkit.tune on a GPU (issue 6): GPU job lab/benchmarks/gpu_jobs/k6t.sh.

    python3 lab/benchmarks/gemm_tuner_check.py --out DIR            # the whole check (GPU)
    python3 lab/benchmarks/gemm_tuner_check.py --out DIR --smoke    # tiny shapes in the interpreter (CPU)

Phases, each writing DIR/gemm_tuner_check.json as it ends (a killed run keeps what it measured):

1. ``tune``: a fresh tune cache; the first call at each shape tunes through solkit.tune.autotune
   (wall time of that call, the winner, the evaluations and their statuses).
2. ``second_process``: a new Python process with the same cache calls the same shapes: it must
   time nothing (evaluated 0, every candidate read back) and pick the same winners; its process
   start to first result is recorded.
3. ``steady``: host time per call once tuned (solkit.tune vs triton.autotune dispatch), a check that
   steady-state calls make no host synchronisation (torch's sync debug mode set to "error"), and a
   CUDA graph capture / replay of every tuned shape compared with an eager call.
4. ``triton``: SOLKIT_GEMM_TUNER=triton picks its own winners (first-call wall time, timings counted
   through a wrapped do_bench); then both winners of every shape are timed with the harness
   protocol (timing.benchmark, method auto, read L2 flush) in one process, interleaved.
5. ``capture_unseen``: a key first met inside a CUDA graph capture, with nothing cached: it must not
   tune (a warning, the first candidate, a correct result) -- the last phase, as a failure there
   could leave the CUDA context unusable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

SHAPES = [  # (name, M, N, K, residual)
    ("prefill_4096", 4096, 4096, 4096, True),
    ("prefill_256", 256, 4096, 4096, False),
    ("decode_1", 1, 4096, 4096, True),
    ("decode_16", 16, 4096, 4096, True),
]
#: the l suite's GEMM rows (solkit bench's main job): what the bench's first calls tune
BENCH_L_SHAPES = [
    ("gemm_8b", 8192, 4096, 4096, False),
    ("gemm_70b", 8192, 8192, 28672, False),
    ("o_proj_8b", 8192, 4096, 4096, True),
    ("o_proj_70b", 8192, 8192, 8192, True),
    ("gate_up_8b", 8192, 28672, 4096, False),
    ("gate_up_70b", 8192, 57344, 8192, False),
]
SMOKE_SHAPES = [("prefill_130", 130, 48, 64, True), ("decode_17", 17, 48, 64, True)]


def _inputs(torch, M, N, K, residual, device, dtype, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, device=device, dtype=dtype, generator=g)
    w = (torch.randn(N, K, device=device, dtype=torch.float32, generator=g) / K**0.5).to(dtype)
    r = torch.randn(M, N, device=device, dtype=dtype, generator=g) if residual else None
    return x, w, r


def _tkey_result(G, family, regime):
    tuner = G._autotuner(family, regime)
    results = getattr(tuner, "results", {})
    return tuner, results


def _shape_list(args):
    return SMOKE_SHAPES if args.smoke else BENCH_L_SHAPES if args.shapes == "bench_l" else SHAPES


def child(args) -> int:
    """Phase 2, in a fresh process: the same shapes with the cache phase 1 filled."""
    t_start = float(args.t_start)
    import torch

    from solkit.kernels.gemm import dispatch as G

    t_import = time.time() - t_start
    smoke = args.smoke
    if smoke:  # the H200's plan (Hopper lists) in the interpreter
        from solkit.kernels.common.capability import caps_for_product, simulate

        h200 = simulate(caps_for_product("h200-sxm"))  # held: its exit (or collection) resets it
        h200.__enter__()
    dev, dtype = ("cpu", torch.float16) if smoke else ("cuda", torch.bfloat16)
    out = {"import_s": round(t_import, 3), "shapes": {}}
    for name, M, N, K, res in _shape_list(args):
        x, w, r = _inputs(torch, M, N, K, res, dev, dtype, seed=M + 11)
        t0 = time.perf_counter()
        y = G.gemm(x, w, residual=r)
        if dev == "cuda":
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        launch = dict(G.LAST_LAUNCH)
        _, results = _tkey_result(G, launch["family"], launch["regime"])
        rec = results.get(next((k for k in results if k[0] == ("M_BUCKET", launch["m_bucket"])
                                and k[1] == ("N", N) and k[2] == ("K", K)), None))  # fmt: skip
        err = (y.float() - G.reference(x, w, residual=r)).abs().max().item()
        out["shapes"][name] = {
            "first_call_s": round(first, 4),
            "since_process_start_s": round(time.time() - t_start, 3),
            "config": launch["config"],
            "evaluated": None if rec is None else len(rec.evaluations),
            "reused_from_cache": None if rec is None else rec.reused,
            "max_abs_err": err,
        }
    print(json.dumps(out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes in Triton's interpreter (CPU)")
    ap.add_argument("--shapes", choices=("default", "bench_l"), default="default")
    ap.add_argument("--stop-after", choices=("tune", "second_process", "steady", "triton", "compare", "capture_unseen"),
                    default="capture_unseen", help="the last phase to run")  # fmt: skip
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--t-start", default="0")
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    cache_dir = Path(tempfile.mkdtemp(prefix="k6t_tune_cache_"))
    os.environ["SOLKIT_TUNE_CACHE"] = str(cache_dir)
    os.environ.pop("SOLKIT_GEMM_TUNER", None)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gemm_tuner_check.json"

    import torch
    import triton

    from solkit.kernels.gemm import dispatch as G
    from solkit.timing import benchmark
    from solkit.tune.cache import environment

    smoke = args.smoke
    if smoke:  # the H200's plan (Hopper lists) in the interpreter
        from solkit.kernels.common.capability import caps_for_product, simulate

        h200 = simulate(caps_for_product("h200-sxm"))  # held: its exit (or collection) resets it
        h200.__enter__()
    dev, dtype = ("cpu", torch.float16) if smoke else ("cuda", torch.bfloat16)
    shapes = _shape_list(args)
    report: dict = {
        "meta": {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "python3 lab/benchmarks/gemm_tuner_check.py " + " ".join(sys.argv[1:]),
            "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (Triton interpreter)",
            "environment": environment(),
            "python": platform.python_version(),
            "dtype": str(dtype),
            "timing": "solkit.harness.timing.benchmark, method auto (graph_events < 100 us, events above), "
            "read L2 flush; the tuner's own timings use the same protocol (BenchSettings defaults)",
            "shapes": [dict(zip(("name", "M", "N", "K", "residual"), s)) for s in shapes],
        },
        "phases": {},
    }

    def save(phase, data):
        report["phases"][phase] = data
        path.write_text(json.dumps(report, indent=1, default=str))
        print(f"[{time.strftime('%H:%M:%S')}] {phase} done", flush=True)

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    # ---------------------------------------------------------------- 1. tune
    inputs = {s[0]: _inputs(torch, s[1], s[2], s[3], s[4], dev, dtype, seed=s[1]) for s in shapes}
    tune: dict = {}
    winners: dict = {}
    for name, *_dims in shapes:
        x, w, r = inputs[name]
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base_mem = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        try:
            y = G.gemm(x, w, residual=r)
            sync()
        except Exception as exc:  # noqa: BLE001 - keep the other shapes
            tune[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(name, "failed:", exc, flush=True)
            continue
        first = time.perf_counter() - t0
        launch = dict(G.LAST_LAUNCH)
        winners[name] = launch
        _, results = _tkey_result(G, launch["family"], launch["regime"])
        res = list(results.values())[-1] if results else None
        peak = (torch.cuda.max_memory_allocated() - base_mem) / 2**20 if dev == "cuda" else None
        err = (y.float() - G.reference(x, w, residual=r)).abs().max().item()
        tune[name] = {
            "first_call_s": round(first, 3),
            "first_call_peak_extra_mib": peak,
            "operands_mib": sum(t.numel() * t.element_size() for t in (x, w, r, y) if t is not None) / 2**20,
            "family": launch["family"], "regime": launch["regime"], "kernel": launch["kernel"],
            "m_bucket": launch["m_bucket"], "config": launch["config"], "max_abs_err": err,
            "tune": None if res is None else {
                "seconds": round(res.seconds, 3), "best_ms": res.best_ms, "statuses": res.statuses,
                "evaluated": len(res.evaluations), "reused_from_cache": res.reused,
                "evaluations": [{k: e.get(k) for k in ("config", "status", "time_ms", "compile_s", "bench_s",
                                                       "max_err", "error")} for e in res.evaluations],
            },
        }  # fmt: skip
        print(name, json.dumps({k: tune[name][k] for k in ("first_call_s", "config")}), flush=True)
    tune["cache_files"] = len(list(cache_dir.rglob("*.json")))
    save("tune", tune)
    if args.stop_after == "tune":
        return 0

    # ---------------------------------------------------------------- 2. a second process
    t_start = time.time()
    cmd = [sys.executable, __file__, "--child", "--out", str(out_dir), "--t-start", repr(t_start),
           "--shapes", args.shapes]  # fmt: skip
    if smoke:
        cmd.append("--smoke")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    second: dict = {"wall_s": round(time.time() - t_start, 3), "rc": proc.returncode}
    try:
        second.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        second["stderr"] = proc.stderr[-2000:]
    for name, rec in second.get("shapes", {}).items():
        rec["same_winner"] = name in winners and rec["config"] == winners[name]["config"]
    save("second_process", second)
    if args.stop_after == "second_process":
        return 0

    # ---------------------------------------------------------------- 3. steady state and CUDA graphs
    steady: dict = {}
    for name, *_ in shapes:
        if name not in winners:
            continue
        x, w, r = inputs[name]
        y = torch.empty(x.shape[0], w.shape[0], device=dev, dtype=dtype)
        rec: dict = {}
        best_ms = (tune[name].get("tune") or {}).get("best_ms") or 0.1
        n = 5 if smoke else int(min(200, max(20, 20.0 / best_ms)))  # ~20 ms of GPU work
        rec["host_calls"] = n
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            G.gemm(x, w, residual=r, out=y)
        rec["host_us_per_call_incl_queueing"] = round((time.perf_counter() - t0) / n * 1e6, 2)
        sync()
        if dev == "cuda":
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(3):
                    G.gemm(x, w, residual=r, out=y)
                rec["no_host_sync"] = True
            except RuntimeError as exc:
                rec["no_host_sync"] = False
                rec["sync_error"] = str(exc)[:300]
            finally:
                torch.cuda.set_sync_debug_mode("default")
            try:
                eager = G.gemm(x, w, residual=r)
                gy = torch.empty_like(eager)
                graph = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    G.gemm(x, w, residual=r, out=gy)  # warm-up on the capture stream
                torch.cuda.current_stream().wait_stream(s)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with torch.cuda.graph(graph):
                        G.gemm(x, w, residual=r, out=gy)
                captured_config = dict(G.LAST_LAUNCH["config"])
                gy.fill_(float("nan"))
                graph.replay()
                sync()
                rec["graph"] = {
                    "ok": bool(torch.equal(gy, eager)),
                    "max_abs_diff_vs_eager": (gy.float() - eager.float()).abs().max().item(),
                    "config_is_winner": captured_config == winners[name]["config"],
                    "warnings": [str(c.message)[:200] for c in caught],
                }
            except Exception as exc:  # noqa: BLE001
                rec["graph"] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        steady[name] = rec
    save("steady", steady)
    if args.stop_after == "steady":
        return 0

    # ---------------------------------------------------------------- 4. triton.autotune's picks, both timed
    solkit_by = {(w["family"], w["regime"]): G._autotuner(w["family"], w["regime"]) for w in winners.values()}
    solkit_tuners = list(solkit_by.values())
    os.environ["SOLKIT_GEMM_TUNER"] = "triton"
    G._autotuner.cache_clear()
    bench_calls = [0]

    def counting_do_bench(kernel_call, quantiles=None, **kw):
        bench_calls[0] += 1
        if dev != "cuda":  # the interpreter cannot time: a stand-in (the smoke run checks plumbing only)
            kernel_call()
            return [1.0 + bench_calls[0] * 1e-3] * 3
        return triton.testing.do_bench(kernel_call, quantiles=quantiles, **kw)

    builder = G._autotuner
    built: dict = {}

    def triton_tuner(family, regime):
        if (family, regime) not in built:
            built[family, regime] = builder.__wrapped__(family, regime, counting_do_bench)
        return built[family, regime]

    G._autotuner = triton_tuner
    tri: dict = {}
    for name, *_dims in shapes:
        x, w, r = inputs[name]
        before = bench_calls[0]
        t0 = time.perf_counter()
        try:
            G.gemm(x, w, residual=r)
            sync()
        except Exception as exc:  # noqa: BLE001
            tri[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        tri[name] = {"first_call_s": round(time.perf_counter() - t0, 3), "config": dict(G.LAST_LAUNCH["config"]),
                     "do_bench_calls": bench_calls[0] - before}  # fmt: skip
    # host cost per call once tuned, both selectors interleaved in this process (best of 3 loops each)
    getters = {"solkit": lambda family, regime: solkit_by[family, regime], "triton": triton_tuner}
    for name, M, N, _K, _res in shapes:
        if name not in winners or "config" not in tri.get(name, {}):
            continue
        x, w, r = inputs[name]
        y = torch.empty(M, N, device=dev, dtype=dtype)
        best_ms = (tune[name].get("tune") or {}).get("best_ms") or 0.1
        n = 5 if smoke else int(min(200, max(20, 20.0 / best_ms)))  # ~20 ms of GPU work per loop
        host = {who: float("inf") for who in getters}
        for _rep in range(3):
            for who, get in getters.items():
                G._autotuner = get
                sync()
                t0 = time.perf_counter()
                for _ in range(n):
                    G.gemm(x, w, residual=r, out=y)
                host[who] = min(host[who], (time.perf_counter() - t0) / n)
                sync()
        tri[name]["host_us_per_call"] = {who: round(v * 1e6, 2) for who, v in host.items()}
        tri[name]["host_calls_per_loop"] = n
    G._autotuner = builder
    os.environ.pop("SOLKIT_GEMM_TUNER", None)
    save("triton", tri)
    if args.stop_after == "triton":
        return 0
    compare: dict = {}
    for name, M, N, K, res in shapes:
        if name not in winners or "config" not in tri.get(name, {}):
            continue
        pool = [_inputs(torch, M, N, K, res, dev, dtype, seed=M + 100 + i) for i in range(3)]
        ys = [torch.empty(M, N, device=dev, dtype=dtype) for _ in pool]
        args_pool = [(*p, y) for p, y in zip(pool, ys)]
        cfgs = {"solkit": winners[name]["config"], "triton": tri[name]["config"]}
        rec = {"same_config": cfgs["solkit"] == cfgs["triton"], "configs": cfgs}
        times: dict = {"solkit": [], "triton": []}
        for _trial in range(1 if smoke else 3):  # interleaved, so drift hits both alike
            for who, cfg in cfgs.items():

                def fn(x, w, r, y, cfg=cfg):
                    G.gemm(x, w, residual=r, config=cfg, out=y)

                t = benchmark(fn, args_pool, method="auto", reps=3 if smoke else 30, trials=1,
                              warmup=1 if smoke else 5)  # fmt: skip
                times[who].append({"median_ms": t.median_ms, "q1_ms": t.q1_ms, "q3_ms": t.q3_ms,
                                   "method": t.method})  # fmt: skip
        for who in cfgs:
            meds = sorted(t["median_ms"] for t in times[who])
            rec[f"{who}_median_ms"] = meds[len(meds) // 2]
        rec["solkit_over_triton"] = rec["solkit_median_ms"] / rec["triton_median_ms"]
        rec["trials"] = times
        compare[name] = rec
    save("compare", compare)
    if args.stop_after == "compare":
        return 0

    # ---------------------------------------------------------------- 5. a key first met inside a capture
    if dev == "cuda":
        unseen: dict = {}
        try:
            x, w, r = _inputs(torch, 40, 4096, 4096, True, dev, dtype, seed=40)  # decode bucket 64: never called
            gy = torch.empty(40, 4096, device=dev, dtype=dtype)
            graph = torch.cuda.CUDAGraph()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch.cuda.graph(graph):
                    G.gemm(x, w, residual=r, out=gy)
            gy.fill_(float("nan"))
            graph.replay()
            sync()
            err = (gy.float() - G.reference(x, w, residual=r)).abs().max().item()
            tuner = G._autotuner("hopper", "decode")
            unseen = {"ok": err < 0.1, "max_abs_err": err, "warnings": [str(c.message)[:200] for c in caught],
                      "remembered": any(k[0] == ("M_BUCKET", 64) for k in tuner.best), "config":
                      dict(G.LAST_LAUNCH.get("config", {}))}  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            unseen = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        save("capture_unseen", unseen)
    for tuner in solkit_tuners:  # the compile workers
        if getattr(tuner, "_pool", None) is not None:
            tuner._pool.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
