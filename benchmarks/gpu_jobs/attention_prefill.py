#!/usr/bin/env python3
"""Prefill attention on the GPU: a small sweep of solkit's launch settings, then solkit against SDPA (enable_gqa,
each backend) timed in the same run, forward and forward+backward, causal, batch 1 x 8192 tokens at Llama-3-8B
(32 q / 8 kv heads) and 70B (64 / 8) heads, head_dim 128; TFLOP/s and SOL fraction on the calibrated ceilings
(the spec ones beside them). solkit runs its tuned defaults on both paths, and with the backward's 5-GEMM
structure (dQ added by the dK/dV kernel with atomics: ``solkit_dq_atomic``); with ``--gluon OPTIONS`` also the lab's
Gluon forward with solkit's backward (``lab_gluon_fwd``). Every timed output is checked against an fp32 reference
first.

    python3 benchmarks/gpu_jobs/attention_prefill.py --out $OUT/prefill.json [--quick]

Run by benchmarks/gpu_jobs/attention_prefill.sh; each part is guarded, so one failure leaves the others' rows.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import sys
import time
import traceback
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from solkit.hardware.calibrate import versions
from solkit.kernels.attention import attention
from solkit.timing import benchmark

SHAPES = {"llama3-8b": (32, 8), "llama3-70b": (64, 8)}
SEQ, HEAD_DIM = 8192, 128
DEVICE, DTYPE = "cuda", torch.bfloat16  # a smoke run of the script's logic on a CPU patches these and the sizes
BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip
#: Forward settings tried at the 8B shape (d128, causal); the tuned ones come first.
FWD_SWEEP = [
    {},
    {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3, "warp_spec": 1},
    {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 2},
    {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 4},
    {"block_m": 128, "block_n": 64, "num_warps": 4, "num_stages": 3},
    {"block_m": 128, "block_n": 128, "num_warps": 8, "num_stages": 2, "warp_spec": 1},
    {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3},
]
BWD_SWEEP = [
    {},
    {"dq": {"atomic": True}},
    {"dkdv": {"block_m": 64, "block_n": 128, "num_warps": 8, "num_stages": 2}},
    {"dkdv": {"block_m": 32, "block_n": 64, "num_warps": 4, "num_stages": 3}},
    {"dkdv": {"block_m": 32, "block_n": 128, "num_warps": 8, "num_stages": 3}},
    {"dq": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}},
    {"dq": {"block_m": 128, "block_n": 32, "num_warps": 8, "num_stages": 3}},
    {"dq": {"atomic": True}, "dkdv": {"block_m": 64, "block_n": 128, "num_warps": 8, "num_stages": 2}},
]


OUT = None


def save(doc):
    """Write the results so far (a timeout later leaves every finished row)."""
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)


def log(*a):
    print(*a, flush=True)


def inputs(hq, hkv, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    mk = lambda h: torch.randn(1, h, SEQ, HEAD_DIM, device=DEVICE, dtype=DTYPE, generator=g)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv), mk(hq)


def sdpa(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return run


def solkit_fn(path=None, options=None):
    return lambda q, k, v: attention(q, k, v, causal=True, path=path, options=options)


def gluon_fn(variant: dict):
    """The lab's Gluon forward (lab/kernels/attention_gluon.py, ``variant`` its options) with solkit's backward op on
    the logsumexp it saves (the same base-2 unit as the Triton forward's): the forward+backward floor with it."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for lab.kernels
    from lab.kernels.attention_gluon import attention_fwd_gluon

    from solkit.kernels.attention.paths import settings
    from solkit.kernels.common.capability import device_caps
    from solkit.kernels.common.ops import options_json

    bwd = settings("bwd", device_caps(DEVICE), HEAD_DIM, 2)
    bwd["dkdv"]["tma"] = True
    bwd_json, scale = options_json(bwd), HEAD_DIM**-0.5

    class GluonAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = attention_fwd_gluon(q, k, v, causal=True, scale=scale, **variant)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, do):
            q, k, v, out, lse = ctx.saved_tensors
            return torch.ops.solkit.attention_bwd(do.contiguous(), q, k, v, out, lse, None, q.shape[2], True, scale,
                                                  bwd_json)  # fmt: skip

    return lambda q, k, v: GluonAttention.apply(q, k, v)


def fwd_bwd(fn):
    def run(q, k, v, do):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        return out, *torch.autograd.grad(out, leaves, do)

    return run


def reference(q, k, v, do):
    """fp32 SDPA forward and gradients; kv heads repeated in fp32 (autograd sums their gradients back over the
    group), so the fp32-capable efficient backend runs it whatever its GQA support."""
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    rep = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(rep, dim=1) for t in leaves[1:])
    out = F.scaled_dot_product_attention(leaves[0], kk, vv, is_causal=True)
    return [out.detach(), *torch.autograd.grad(out, leaves, do.float())]


def max_err(got, want):
    return [float((g.float() - w).abs().max()) for g, w in zip(got, want)]


def time_ms(fn, args):
    r = benchmark(fn, [args], reps=20, trials=3, warmup=3)
    return r.median_ms, r.method


def ceilings():
    from solkit.sol.ceilings import get_ceilings

    out = {}
    for basis in ("calibrated", "spec"):
        t0 = time.time()
        try:
            c = get_ceilings(basis=basis, quick=True)
            out[basis] = {"bf16_tensor": c.peak("bf16_tensor"), "bandwidth": c.bandwidth, "arch": c.arch,
                          "seconds": round(time.time() - t0, 1)}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - a missing basis leaves the other
            out[basis] = {"error": f"{type(e).__name__}: {e}"}
    return out


def flops(hq, direction):
    fwd = 2.0 * hq * SEQ * SEQ * HEAD_DIM  # causal: 4 B Hq S^2 D / 2
    return fwd if direction == "fwd" else 3.5 * fwd  # forward + backward (2.5 x forward)


def sweep(doc, quick):
    hq, hkv = next(iter(SHAPES.values()))  # Llama-3-8B heads
    q, k, v, do = inputs(hq, hkv)
    want = reference(q, k, v, do)
    try:
        rival = fwd_bwd(sdpa(BACKENDS["sdpa_flash"]))(q, k, v, do)
    except RuntimeError:  # flash refused: SDPA's own choice
        rival = fwd_bwd(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True))(
            q, k, v, do
        )
    tol = [2.0 * e + 2e-3 for e in max_err(rival, want)]
    fwd = [("fwd", o) for o in FWD_SWEEP[1:]]
    bwd = [("bwd", o) for o in BWD_SWEEP[1:]]
    todo = [("fwd", {})] + [x for pair in itertools.zip_longest(fwd, bwd) for x in pair if x]  # alternate
    for direction, opts in todo[: 5 if quick else None]:
        row = {"direction": direction, "options": opts}
        try:
            fn = solkit_fn(options={direction: opts})
            got = fwd_bwd(fn)(q, k, v, do)
            row["max_err"] = max_err(got, want)
            row["correct"] = all(e <= t for e, t in zip(row["max_err"], tol))
            args, f = ((q, k, v), fn) if direction == "fwd" else ((q, k, v, do), fwd_bwd(fn))
            row["ms"], row["method"] = time_ms(f, args)
        except Exception as e:  # noqa: BLE001 - a config that fails to compile is a result
            row["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:400]
        log("sweep", json.dumps(row))
        doc["sweep"].append(row)
        save(doc)


def compare(doc, ceil, gluon=None):
    peak = {b: c.get("bf16_tensor") for b, c in ceil.items()}
    for shape, (hq, hkv) in SHAPES.items():
        q, k, v, do = inputs(hq, hkv, seed=1)
        want = reference(q, k, v, do)
        impls = {"solkit": solkit_fn(), "solkit_portable": solkit_fn(path="portable"),
                 "solkit_dq_atomic": solkit_fn(options={"bwd": {"dq": {"atomic": True}}})}  # fmt: skip
        impls.update({name: sdpa(b) for name, b in BACKENDS.items()})
        if gluon is not None:  # last: a kernel that hangs would cost the rows after it
            impls["lab_gluon_fwd"] = gluon_fn(gluon)
        errs = {}
        for name, fn in impls.items():
            row = {"shape": shape, "heads_q": hq, "heads_kv": hkv, "seq": SEQ, "head_dim": HEAD_DIM, "impl": name}
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = fwd_bwd(fn)(q, k, v, do)
                errs[name] = row["max_err"] = max_err(got, want)
                for direction, f, args in (("fwd", fn, (q, k, v)), ("fwd_bwd", fwd_bwd(fn), (q, k, v, do))):
                    ms, method = time_ms(f, args)
                    fl = flops(hq, direction)
                    row[direction] = {"ms": ms, "method": method, "tflops": fl / ms / 1e9,
                                      "sol": {b: (fl / p) / (ms / 1e3) for b, p in peak.items() if p}}  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a backend that refuses the shape says why
                msgs = "; ".join(str(w.message) for w in caught)[:600] if "caught" in locals() else ""
                row["refused"] = " ".join(f"{type(e).__name__}: {e} {msgs}".split())[:800]
            log("row", json.dumps(row))
            doc["rows"].append(row)
            save(doc)
        rival = next((errs[n] for n in BACKENDS if n in errs), None)  # flash's, else the next SDPA backend's
        if rival is not None:  # correct: within twice SDPA's own bf16 error of the fp32 reference
            for row in doc["rows"]:
                if row["shape"] == shape and "max_err" in row:
                    row["correct"] = all(e <= 2 * f + 2e-3 for e, f in zip(row["max_err"], rival))


def table(doc):
    log(f"\n{'shape':<11} {'impl':<16} {'fwd ms':>8} {'TF/s':>6} {'SOL':>5} {'fb ms':>8} {'TF/s':>6} {'SOL':>5}  ok")
    for r in doc["rows"]:
        if "refused" in r:
            log(f"{r['shape']:<11} {r['impl']:<16} refused: {r['refused'][:90]}")
            continue
        cells = []
        for d in ("fwd", "fwd_bwd"):
            x = r[d]
            sol = x["sol"].get("calibrated", x["sol"].get("spec", float("nan")))
            cells.append(f"{x['ms']:8.3f} {x['tflops']:6.0f} {sol:5.2f}")
        log(f"{r['shape']:<11} {r['impl']:<16} {'  '.join(cells)}  {r.get('correct')}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="the first five sweep settings only")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--gluon", default=None, help="JSON options of the lab Gluon forward to time with solkit's backward")
    args = p.parse_args(argv)
    global OUT
    OUT = args.out
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    doc = {"device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "versions": versions(), "command": " ".join(["python3", *sys.argv]), "seq": SEQ, "head_dim": HEAD_DIM,
           "flops": "fwd 2 B Hq S^2 D (causal half of 4 B Hq S^2 D); fwd_bwd 3.5 x fwd",
           "sweep": [], "rows": []}  # fmt: skip
    for name, part in (("ceilings", ceilings), ("compare", None), ("sweep", None)):
        t0 = time.time()
        try:
            if name == "ceilings":
                doc["ceilings"] = part()
                log("ceilings", json.dumps(doc["ceilings"]))
            elif name == "sweep" and not args.skip_sweep:
                sweep(doc, args.quick)
            elif name == "compare":
                compare(doc, doc.get("ceilings", {}), json.loads(args.gluon) if args.gluon else None)
        except Exception:  # noqa: BLE001 - one part failing must not lose the others
            doc.setdefault("errors", {})[name] = traceback.format_exc()[-2000:]
            log(f"{name} failed:\n{doc['errors'][name]}")
        doc.setdefault("seconds", {})[name] = round(time.time() - t0, 1)
        save(doc)
    table(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
