#!/usr/bin/env python3
"""Structure and launch-setting sweep of solkit's prefill attention on one GPU (issue 23's floor of each structure).

    python3 lab/benchmarks/attention_sweep.py --out $OUT/attention_sweep.json [--part fwd|bwd] [--deadline S]

* ``fwd``: every tile (block_m 64/128, block_n 32/64/128), num_warps 4/8, num_stages 2/3/4 with TMA loads (pointer
  loads at 3 stages), at Llama-3-8B heads (32 q / 8 kv); then the structure knobs of ``prefill.STRUCTURE`` (one
  causal loop, exp without the folded scale, lazy rescale, eager normalisation, the next tile's ``Q K^T`` before
  this tile's softmax), ``warp_spec`` and the Triton build's warp-specialisation compiler options where it has
  them, on four tiles; two programs per SM at 8 warps (``maxnreg`` 128); the best configs again at 70B heads
  (64 / 8). SDPA flash, cuDNN and efficient (``enable_gqa``) in the same run.
* ``bwd``: the backward alone (the forward's saved output and logsumexp as inputs): dK/dV and dQ tiles, the
  5-GEMM atomic-dQ structure, TMA and pointer loads; SDPA's backward alone beside it.

Every config is first run once by a pool of compile workers (spawned processes sharing ``TRITON_CACHE_DIR``, so
the timed process finds the kernels compiled), then checked against the fp32 reference (output; logsumexp against
the default config's) and timed by ``solkit.timing.benchmark`` (median of trials, L2 flushed, CUDA graph where
short). Causal, batch 1 x 8192 tokens, head_dim 128, bf16. FLOPs counted causally (half the score matrix);
SOL on the datasheet bf16 peak and on the one calibrated in the run. A config that fails to compile or is wrong
is a row with its reason. Results are written after every row, and the run stops starting rows at ``--deadline``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

SEQ, HEAD_DIM = 8192, 128
DEVICE, DTYPE = (
    "cuda",
    torch.bfloat16,
)  # --smoke: the CPU interpreter at a tiny size (the script's logic, not its numbers)
SHAPES = {"llama3-8b": (32, 8), "llama3-70b": (64, 8)}
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


# ------------------------------------------------------------------------------------------------ configs
def fwd_configs() -> list[dict]:
    """Each a ``{"path": tma|portable, "fwd": {...}}`` entry; the first is the shipped default (no overrides)."""
    out = [{"path": "tma", "fwd": {}}]
    for bm, bn, w, st in itertools.product((128, 64), (64, 128, 32), (8, 4), (3, 2, 4)):
        out.append({"path": "tma", "fwd": {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": st}})
    for bm, bn, w in itertools.product((128, 64), (64, 128, 32), (8, 4)):  # pointer loads: against TMA at 3 stages
        out.append({"path": "portable", "fwd": {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": 3}})
    tiles = [{"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3},
             {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3},
             {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2},
             {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 2}]  # fmt: skip
    knobs = [{"causal_loop": "one"}, {"exp2_fold": 0}, {"rescale": "lazy"}, {"normalise": "eager"}, {"pipeline": 1},
             {"pipeline": 1, "rescale": "lazy"}, {"warp_spec": 1}, {"warp_spec": 1, "pipeline": 1}]  # fmt: skip
    for tile in tiles:
        for k in knobs:
            out.append({"path": "tma", "fwd": {**tile, **k}})
    # two programs per SM (one warpgroup each, as in the grid, or 8 warps capped at 128 registers): the SM's warp
    # schedulers interleave one program's softmax with the other's GEMMs, the overlap FlashAttention-3 schedules
    for tile in ({"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 2},
                 {"block_m": 64, "block_n": 64, "num_warps": 8, "num_stages": 2}):  # fmt: skip
        out.append({"path": "tma", "fwd": {**tile, "compile": {"maxnreg": 128}}})
    for opt in warp_spec_compile_options():  # the Triton build's own warp-specialisation knobs, where present
        out.append({"path": "tma", "fwd": {**tiles[0], "warp_spec": 1, "compile": opt}})
    return out


def warp_spec_compile_options() -> list[dict]:
    """Compiler options some Triton builds take for warp specialisation (``num_consumer_groups``,
    ``num_buffers_warp_spec``): those the installed build's CUDA options have."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions

        fields = set(CUDAOptions.__dataclass_fields__)
    except Exception:  # noqa: BLE001 - no NVIDIA backend: none
        return []
    out = []
    if "num_consumer_groups" in fields:
        out.append({"num_consumer_groups": 2, **({"num_buffers_warp_spec": 3} if "num_buffers_warp_spec" in fields
                                                 else {})})  # fmt: skip
    return out


def bwd_configs() -> list[dict]:
    out = [{"path": "tma", "bwd": {}}, {"path": "portable", "bwd": {}}]
    dkdv = [(64, 64, 8, 2), (64, 128, 8, 2), (32, 64, 4, 3), (32, 128, 8, 3), (64, 64, 4, 2), (64, 128, 8, 3),
            (32, 64, 4, 2), (64, 64, 8, 3)]  # fmt: skip
    dq = [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 3), (128, 64, 8, 3), (64, 32, 4, 3), (128, 128, 8, 2)]
    for bm, bn, w, st in dkdv:
        out.append({"path": "tma", "bwd": {"dkdv": {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": st}}})
    for bm, bn, w, st in dq:
        out.append({"path": "tma", "bwd": {"dq": {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": st}}})
    for bm, bn, w, st in dkdv[:4]:
        out.append(
            {
                "path": "tma",
                "bwd": {
                    "dq": {"atomic": True},
                    "dkdv": {"block_m": bm, "block_n": bn, "num_warps": w, "num_stages": st},
                },
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ running
def inputs(hq, hkv, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    mk = lambda h: torch.randn(1, h, SEQ, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=g)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv), mk(hq)


def bwd_settings(cfg: dict) -> dict:
    """The full backward launch settings of ``cfg``: the tuned ones with its overrides (as attention() merges)."""
    from solkit.kernels.attention.paths import settings
    from solkit.kernels.common.capability import device_caps

    bwd = settings("bwd", device_caps(DEVICE), HEAD_DIM, 2)
    bwd["dkdv"]["tma"] = cfg["path"] == "tma"
    for key, value in cfg.get("bwd", {}).items():
        bwd[key] = {**bwd[key], **value} if isinstance(value, dict) else value
    return bwd


def fwd_call(cfg):
    from solkit.kernels.attention import attention

    return lambda q, k, v: attention(q, k, v, causal=True, path=cfg["path"], options={"fwd": cfg.get("fwd", {})})


def bwd_call(cfg, q, k, v):
    """The backward alone on the forward's saved output and logsumexp (the redefined rows' protocol)."""
    from solkit.kernels.attention.backward import backward
    from solkit.kernels.attention.layout import geometry
    from solkit.kernels.attention.paths import settings
    from solkit.kernels.attention.prefill import forward
    from solkit.kernels.common.capability import device_caps

    geo = geometry(q, k, v, True)
    fcfg = {**settings("fwd", device_caps(DEVICE), HEAD_DIM, 2), "tma": True}
    scale = HEAD_DIM**-0.5
    out, lse = forward(q, k, v, geo, True, scale, None, fcfg)
    bcfg = bwd_settings(cfg)
    return lambda do: backward(do, q, k, v, out, lse, geo, True, scale, None, bcfg)


def _capture_kernels() -> dict:
    """Record each launched attention kernel's registers, spills and shared memory (Triton's launch returns the
    compiled kernel): {kernel name: {...}}, filled as the kernels run."""
    from solkit.kernels.attention import backward as bwd_mod
    from solkit.kernels.attention import prefill as fwd_mod

    seen: dict = {}
    for mod, name in ((fwd_mod, "attention_fwd_kernel"), (bwd_mod, "attention_bwd_dkdv_kernel"),
                      (bwd_mod, "attention_bwd_dq_kernel")):  # fmt: skip
        jit = getattr(mod, name)
        run = type(jit).run

        def wrapped(*a, _jit=jit, _run=run, _name=name, **kw):
            k = _run(_jit, *a, **kw)
            with contextlib.suppress(Exception):  # a build without these fields: none recorded
                seen[_name] = {"regs": k.n_regs, "spills": k.n_spills, "shared": k.metadata.shared}
            return k

        jit.run = wrapped
    return seen


def _compile_one(job):
    """Worker: run one config once at the 8B shape (compiles it into the shared cache); returns (error or None,
    the kernels' registers/spills/shared memory)."""
    part, cfg = job
    seen = _capture_kernels()
    try:
        q, k, v, do = inputs(*SHAPES["llama3-8b"])
        if part == "fwd":
            fwd_call(cfg)(q, k, v)
        else:
            bwd_call(cfg, q, k, v)(do)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return None, seen
    except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
        return " ".join(f"{type(e).__name__}: {e}".split())[:500], seen


def precompile(part, cfgs, workers, deadline):
    """Compile every config in ``workers`` spawned processes; returns ({index: error}, {index: kernel stats})."""
    if workers <= 1:
        return {}, {}
    ctx = mp.get_context("spawn")
    errors, stats = {}, {}
    t0 = time.time()
    with ctx.Pool(workers) as pool:
        results = [pool.apply_async(_compile_one, ((part, c),)) for c in cfgs]
        for i, r in enumerate(results):
            try:
                err, stats[i] = r.get(timeout=max(1.0, deadline - time.time()))
            except Exception as e:  # noqa: BLE001 - timeout: the timed loop compiles it itself
                err = None
                log(f"precompile {part} #{i}: {type(e).__name__}")
            if err:
                errors[i] = err
        pool.terminate()
    log(f"precompiled {len(cfgs)} {part} configs in {time.time() - t0:.1f}s, {len(errors)} failed")
    return errors, stats


def time_ms(fn, args):
    from solkit.timing import benchmark

    r = benchmark(fn, [args], reps=30 if DEVICE == "cuda" else 1, trials=3 if DEVICE == "cuda" else 1, warmup=3)
    return r.median_ms, r.method


def flops(hq, direction):
    fwd = 2.0 * hq * SEQ * SEQ * HEAD_DIM  # causal: 4 B Hq S^2 D / 2
    return fwd if direction == "fwd" else 2.5 * fwd


def score(row, hq, direction, peaks):
    fl = flops(hq, direction)
    row["tflops"] = fl / row["ms"] / 1e9
    row["sol"] = {basis: fl / p / (row["ms"] / 1e3) for basis, p in peaks.items() if p}


def sdpa_rows(doc, shape, q, k, v, do, ref, peaks, direction):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    hq = q.shape[1]
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):  # fmt: skip
        row = {"part": direction, "shape": shape, "impl": name}
        try:
            with sdpa_kernel(backend):
                if direction == "fwd":
                    fn = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True)  # noqa: E731
                    row["max_err"] = float((fn(q, k, v).float() - ref).abs().max())
                    row["ms"], row["method"] = time_ms(fn, (q, k, v))
                else:
                    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                    out = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
                    fn = lambda g, out=out, leaves=leaves: torch.autograd.grad(out, leaves, g, retain_graph=True)  # noqa: E731
                    row["ms"], row["method"] = time_ms(fn, (do,))
            score(row, hq, direction, peaks)
        except Exception as e:  # noqa: BLE001 - a backend that refuses says why
            row["refused"] = " ".join(f"{type(e).__name__}: {e}".split())[:400]
        log(direction, shape, name, {k: row.get(k) for k in ("ms", "tflops", "refused")})
        doc["rows"].append(row)


def reference(q, k, v):
    rep = q.shape[1] // k.shape[1]
    kk, vv = (t.float().repeat_interleave(rep, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.float(), kk, vv, is_causal=True)


def ref_grads(q, k, v, do):
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    rep = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(rep, dim=1) for t in leaves[1:])
    out = F.scaled_dot_product_attention(leaves[0], kk, vv, is_causal=True)
    return torch.autograd.grad(out, leaves, do.float())


def run_fwd(doc, cfgs, errors, shape, peaks, deadline, save):
    hq, hkv = SHAPES[shape]
    q, k, v, do = inputs(hq, hkv)
    ref = reference(q, k, v)
    sdpa_rows(doc, shape, q, k, v, do, ref, peaks, "fwd")
    rival_err = min((r["max_err"] for r in doc["rows"] if r["shape"] == shape and "max_err" in r
                     and r["impl"].startswith("sdpa") and r["part"] == "fwd"), default=0.02)  # fmt: skip
    tol = 2.0 * rival_err + 2e-3
    lse0 = None
    for i, cfg in enumerate(cfgs):
        if time.time() > deadline:
            doc["skipped_for_time"].append({"part": "fwd", "shape": shape, **cfg})
            continue
        row = {"part": "fwd", "shape": shape, "impl": "solkit", "index": i, **cfg}
        if i in errors:
            row["error"] = errors[i]
        else:
            try:
                fn = fwd_call(cfg)
                out = fn(q, k, v)
                row["max_err"] = float((out.float() - ref).abs().max())
                row["correct"] = row["max_err"] <= tol
                if lse0 is None and i == 0:
                    lse0 = _lse(cfg, q, k, v)
                elif lse0 is not None:
                    row["lse_err"] = float((_lse(cfg, q, k, v) - lse0).abs().max())
                    row["correct"] = row["correct"] and row["lse_err"] <= 1e-2
                if row["correct"]:
                    row["ms"], row["method"] = time_ms(fn, (q, k, v))
                    score(row, hq, "fwd", peaks)
            except Exception as e:  # noqa: BLE001 - a config that fails is a result
                row["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        log("fwd", shape, json.dumps(cfg), {k: row.get(k) for k in ("ms", "tflops", "correct", "error")})
        doc["rows"].append(row)
        save()


def _lse(cfg, q, k, v):
    from solkit.kernels.attention.layout import geometry
    from solkit.kernels.attention.paths import settings
    from solkit.kernels.attention.prefill import forward
    from solkit.kernels.common.capability import device_caps

    fcfg = {**settings("fwd", device_caps(DEVICE), HEAD_DIM, 2), **cfg.get("fwd", {}), "tma": cfg["path"] == "tma"}
    return forward(q, k, v, geometry(q, k, v, True), True, HEAD_DIM**-0.5, None, fcfg)[1]


def run_bwd(doc, cfgs, errors, shape, peaks, deadline, save):
    hq, hkv = SHAPES[shape]
    q, k, v, do = inputs(hq, hkv)
    want = ref_grads(q, k, v, do)
    sdpa_rows(doc, shape, q, k, v, do, None, peaks, "bwd")
    tol = [0.05, 0.05, 0.05]  # absolute, on gradients of O(1): bf16 GEMMs at 8k keys
    for i, cfg in enumerate(cfgs):
        if time.time() > deadline:
            doc["skipped_for_time"].append({"part": "bwd", "shape": shape, **cfg})
            continue
        row = {"part": "bwd", "shape": shape, "impl": "solkit", "index": i, **cfg}
        if i in errors:
            row["error"] = errors[i]
        else:
            try:
                fn = bwd_call(cfg, q, k, v)
                got = fn(do)
                row["max_err"] = [float((g.float() - w).abs().max()) for g, w in zip(got, want)]
                row["correct"] = all(e <= t for e, t in zip(row["max_err"], tol))
                if row["correct"]:
                    row["ms"], row["method"] = time_ms(fn, (do,))
                    score(row, hq, "bwd", peaks)
            except Exception as e:  # noqa: BLE001 - a config that fails is a result
                row["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        log("bwd", shape, json.dumps(cfg), {k: row.get(k) for k in ("ms", "tflops", "correct", "error")})
        doc["rows"].append(row)
        save()


#: The plain variant first (a hang in a later one, killed by the job's cap, leaves its rows)
GLUON_VARIANTS = [{"block_n": 128, "stages": 2}, {"block_n": 128, "stages": 3, "intra": True},
                  {"block_n": 64, "stages": 4, "intra": True}, {"block_n": 128, "stages": 2, "pingpong": True},
                  {"block_n": 64, "stages": 3}]  # fmt: skip


def run_gluon(doc, peaks, deadline, save):
    """lab/kernels/attention_gluon.py (two consumer warpgroups and a TMA loader warp), each variant at both shapes
    (so a run cut short has whole variants): checked against fp32 (output) and the Triton forward (logsumexp),
    then timed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for lab.kernels
    from lab.kernels.attention_gluon import attention_fwd_gluon

    cases = {}
    for shape, (hq, hkv) in SHAPES.items():
        q, k, v, _ = inputs(hq, hkv)
        cases[shape] = (hq, (q, k, v), reference(q, k, v), _lse({"path": "tma", "fwd": {}}, q, k, v))
    for opts in GLUON_VARIANTS:
        for shape, (hq, args, ref, lse0) in cases.items():
            if time.time() > deadline:
                doc["skipped_for_time"].append({"part": "gluon", "shape": shape, **opts})
                continue
            row = {"part": "fwd", "shape": shape, "impl": "solkit_gluon", "path": "gluon", "fwd": opts}
            try:
                fn = lambda a, b, c, o=opts: attention_fwd_gluon(a, b, c, causal=True, **o)  # noqa: E731
                out, lse = fn(*args)
                torch.cuda.synchronize()
                row["max_err"] = float((out.float() - ref).abs().max())
                row["lse_err"] = float((lse - lse0).abs().max())
                row["correct"] = row["max_err"] <= 0.05 and row["lse_err"] <= 1e-2
                if row["correct"]:
                    row["ms"], row["method"] = time_ms(fn, args)
                    score(row, hq, "fwd", peaks)
            except Exception as e:  # noqa: BLE001 - a variant that fails is a result
                row["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:500]
            log(
                "gluon",
                shape,
                json.dumps(opts),
                {k: row.get(k) for k in ("ms", "tflops", "max_err", "correct", "error")},
            )
            doc["rows"].append(row)
            save()


def best(doc, part, shape, n):
    rows = [r for r in doc["rows"] if r["part"] == part and r["shape"] == shape and r["impl"] == "solkit"
            and "ms" in r]  # fmt: skip
    return sorted(rows, key=lambda r: r["ms"])[:n]


def peaks_now() -> tuple[dict, dict]:
    from solkit.sol.ceilings import get_ceilings

    info, peaks = {}, {}
    for basis in ("calibrated", "spec"):
        try:
            c = get_ceilings(basis=basis, quick=True)
            peaks[basis] = c.peak("bf16_tensor")
            info[basis] = {"bf16_tensor": peaks[basis], "bandwidth": c.bandwidth, "arch": c.arch}
        except Exception as e:  # noqa: BLE001 - a missing basis leaves the other
            info[basis] = {"error": f"{type(e).__name__}: {e}"}
    return info, peaks


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--part", choices=("fwd", "bwd", "gluon"), default="fwd")
    p.add_argument("--deadline", type=float, default=200.0, help="seconds after start past which no row starts")
    p.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    p.add_argument("--limit", type=int, default=None, help="the first N configs only")
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, 64 tokens, head_dim 16, fp32")
    p.add_argument("--top", type=int, default=6, help="best configs of the 8B shape re-timed at 70B heads")
    args = p.parse_args(argv)
    deadline = T0 + args.deadline
    import triton

    from solkit.hardware.calibrate import versions

    if args.smoke:
        global DEVICE, DTYPE, SEQ, HEAD_DIM
        DEVICE, DTYPE, SEQ, HEAD_DIM, args.workers = "cpu", torch.float32, 64, 16, 1
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    doc = {"device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "versions": versions(), "triton": triton.__version__, "command": " ".join(["python3", *sys.argv]),
           "part": args.part, "seq": SEQ, "head_dim": HEAD_DIM, "dtype": "bfloat16", "causal": True,
           "flops": "fwd 2 B Hq S^2 D (causal half of 4 B Hq S^2 D); bwd 2.5 x fwd",
           "warp_spec_compile_options": warp_spec_compile_options(), "rows": [], "skipped_for_time": []}  # fmt: skip

    def save():
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)

    cfgs = (fwd_configs() if args.part == "fwd" else bwd_configs())[: args.limit]
    doc["configs"] = len(cfgs)
    if args.part == "gluon":
        try:
            doc["ceilings"], peaks = peaks_now()
            run_gluon(doc, peaks, deadline, save)
        except Exception:  # noqa: BLE001 - keep every finished row
            doc["error"] = traceback.format_exc()[-3000:]
            log(doc["error"])
        doc["seconds"] = round(time.time() - T0, 1)
        save()
        return 0
    try:
        errors, stats = precompile(args.part, cfgs, args.workers, T0 + args.deadline * 0.45)
        doc["ceilings"], peaks = peaks_now()
        log("ceilings", json.dumps(doc["ceilings"]))
        run = run_fwd if args.part == "fwd" else run_bwd
        run(doc, cfgs, errors, "llama3-8b", peaks, deadline, save)
        for r in doc["rows"]:
            if r["shape"] == "llama3-8b" and stats.get(r.get("index")):
                r["kernels"] = stats[r["index"]]
        top = [{k: r[k] for k in ("path", args.part) if k in r} for r in best(doc, args.part, "llama3-8b", args.top)]
        if cfgs[0] not in top:
            top.insert(0, cfgs[0])
        run(doc, top, {}, "llama3-70b", peaks, deadline + 30, save)
    except Exception:  # noqa: BLE001 - keep every finished row
        doc["error"] = traceback.format_exc()[-3000:]
        log(doc["error"])
    doc["seconds"] = round(time.time() - T0, 1)
    save()
    for shape in SHAPES:
        for r in best(doc, args.part, shape, 8):
            sol = r["sol"].get("calibrated", float("nan"))
            cfg = json.dumps(r[args.part])
            log(f"best {shape} {r['ms']:.3f} ms {r['tflops']:.0f} TF/s SOL {sol:.2f} {r['path']} {cfg}")
        for r in doc["rows"]:
            if r["shape"] == shape and r["impl"].startswith("sdpa") and r["part"] == args.part and "ms" in r:
                log(f"rival {shape} {r['impl']} {r['ms']:.3f} ms {r['tflops']:.0f} TF/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
