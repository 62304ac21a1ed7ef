# ruff: noqa: E501 (a dated record; the results move lengthened the paths in its comments)
"""Launcher sweeps of the norm/softmax kernel benchmark (``lab/benchmarks/kernels_norm.py --sweep``): each
solkit launcher alone over a few configurations, every one checked against an fp32 reference before
it is timed; the wide-row softmax adoption; the dW partial-sum reduction alone."""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F
from kernels_norm_common import (
    EPS,
    as_tuple,
    calls_for,
    elapsed,
    hf_rmsnorm,
    make_inputs,
    poison_free_memory,
    sol_cols,
)

from solkit.kernels.common.device import sm_count
from solkit.kernels.common.rows import sum_partials
from solkit.kernels.norms.layer_norm import layernorm_backward, layernorm_forward
from solkit.kernels.norms.rms_norm import rmsnorm_backward, rmsnorm_forward
from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward
from solkit.timing import benchmark

#: Launcher sweep, per op and kernel: solkit launcher keyword arguments, the measured default first.
#: Wide softmax rows: the looped path against cooperative (segment, warps, programs per SM) variants.
_RMS_FWD = [dict(num_warps=8), dict(num_warps=4), dict(num_warps=16), dict(block_m=2, num_warps=8),
            dict(block_m=4, num_warps=16), dict(num_warps=8, maxnreg=32)]  # fmt: skip
_RMS_BWD = [
    dict(num_warps=16, programs_per_sm=2),
    dict(num_warps=16, programs_per_sm=2, prefetch=2),
    dict(num_warps=32, programs_per_sm=1, prefetch=2),
    dict(num_warps=8, programs_per_sm=2),
    dict(num_warps=8, programs_per_sm=2, prefetch=2),
]
_LOOPED = dict(coop=False, split=False)


def _split(segment, chunk, warps, per_sm, lookahead=1):
    return dict(split=dict(segment=segment, chunk=chunk, num_warps=warps, per_sm=per_sm, lookahead=lookahead))


# Wide rows: the looped path, the split-row path (default first), one cooperative variant (round 3a's best).
_WIDE_FWD = [_split(16384, 8192, 16, 2), _LOOPED, _split(32768, 8192, 16, 2), _split(8192, 8192, 16, 2),
             _split(32768, 16384, 32, 1), _split(16384, 4096, 8, 4), _split(16384, 8192, 16, 2, 0),
             _split(65536, 8192, 16, 2, 0), _split(65536, 16384, 32, 1, 0),
             dict(coop=True, coop_segment=4096, num_warps=8, coop_per_sm=4)]  # fmt: skip
_WIDE_BWD = [_split(8192, 4096, 16, 2), _LOOPED, _split(16384, 4096, 16, 2), _split(4096, 4096, 16, 2),
             _split(16384, 8192, 32, 1), _split(8192, 2048, 8, 4), _split(8192, 4096, 16, 2, 0),
             _split(32768, 8192, 32, 1, 0)]  # fmt: skip
#: Round 3b's extra forward variants around the defaults set from round 3a (more rows per program share
#: the parameter loads).
FWD_EXTRA = {
    "layernorm": [dict(block_m=2, num_warps=8), dict(block_m=4, num_warps=16), dict(block_m=4, num_warps=8)],
    "rmsnorm": [dict(block_m=2, num_warps=8), dict(block_m=4, num_warps=8), dict(num_warps=4)],
}
SWEEP = {
    "softmax_vocab": {"fwd": _WIDE_FWD, "bwd": _WIDE_BWD},
    "softmax_256k": {"fwd": _WIDE_FWD, "bwd": _WIDE_BWD},
    "layernorm": {
        "fwd": [
            dict(num_warps=4, one_pass=False),
            dict(num_warps=4, one_pass=True),
            dict(num_warps=8, one_pass=True),
            dict(num_warps=8, one_pass=False),
            dict(num_warps=2, one_pass=True),
            dict(block_m=2, num_warps=8, one_pass=True),
        ],
        "bwd": [
            dict(num_warps=8, programs_per_sm=2),
            dict(num_warps=8, programs_per_sm=2, prefetch=2),
            dict(num_warps=16, programs_per_sm=2),
            dict(num_warps=32, programs_per_sm=1, prefetch=2),
            dict(num_warps=32, programs_per_sm=1),
        ],
    },
    "rmsnorm": {"fwd": _RMS_FWD, "bwd": _RMS_BWD},
    "rmsnorm_fwd_extra": {"fwd": FWD_EXTRA["rmsnorm"]},
    "layernorm_fwd_extra": {"fwd": FWD_EXTRA["layernorm"]},
    "add_rmsnorm": {"fwd": _RMS_FWD, "bwd": _RMS_BWD},
    "softmax": {
        "fwd": [dict(num_warps=8), dict(num_warps=4), dict(num_warps=16)],
        "bwd": [dict(num_warps=8), dict(num_warps=4)],
    },  # fmt: skip
}
#: Llama-3-70B rows (8192 wide; round 4): the backward as one program per SM (16 or 32 warps, 64-128
#: registers a thread, no spills) against the 4096-wide defaults (two 16-warp programs per SM, which spill),
#: and forward warps. The first entry of each list is the per-width default (``by_width``).
_WIDE_NORM_BWD = [
    dict(num_warps=16, programs_per_sm=1, prefetch=1),
    dict(num_warps=16, programs_per_sm=1, prefetch=2),
    dict(num_warps=32, programs_per_sm=1, prefetch=1),
    dict(num_warps=16, programs_per_sm=2, prefetch=1),
]
#: The wide-row softmax defaults alone (``SPLIT_CONFIG``: split-row, round 3b's winners) and the looped
#: path, to re-check a kernel change against round 3b's sweep.
_WIDE_CHECK = {"fwd": [_split(65536, 8192, 16, 2, 0), _LOOPED], "bwd": [_split(16384, 4096, 16, 2, 1), _LOOPED]}
#: Forward variants at 8192 wide: the default (8 warps, 112 registers, 2 programs per SM) against more
#: warps and capped registers (more programs resident, more bytes in flight; ptxas reports at most 12
#: bytes of spills for these).
_WIDE_NORM_FWD = [dict(num_warps=8), dict(num_warps=16), dict(num_warps=32, maxnreg=32), dict(num_warps=16, maxnreg=40)]
_LOOPED_PREFETCH = [
    {},
    dict(chunk=2048, num_warps=8, looped_prefetch=True),
    dict(chunk=1024, num_warps=4, looped_prefetch=True),
    dict(chunk=4096, num_warps=16, looped_prefetch=True),
    dict(chunk=0, num_warps=16),
]
SWEEP.update({
    "layernorm_70b": {"bwd": _WIDE_NORM_BWD, "fwd": _WIDE_NORM_FWD[:3]},
    "rmsnorm_70b": {"bwd": _WIDE_NORM_BWD[:3], "fwd": _WIDE_NORM_FWD},
    "add_rmsnorm_70b": {"bwd": _WIDE_NORM_BWD[:1], "fwd": _WIDE_NORM_FWD},
    # round 2: the two-pass looped forward (``chunk``) against the one-block default, both widths
    "rmsnorm_fwd_looped": {"fwd": [{}, dict(chunk=1024, num_warps=4), dict(chunk=2048, num_warps=8),
                                   dict(chunk=2048, num_warps=4)]},
    "add_rmsnorm_fwd_looped": {"fwd": [{}, dict(chunk=1024, num_warps=4), dict(chunk=2048, num_warps=8)]},
    "rmsnorm_70b_fwd_looped": {"fwd": [{}, dict(chunk=1024, num_warps=4), dict(chunk=2048, num_warps=8),
                                       dict(chunk=2048, num_warps=4)]},
    "add_rmsnorm_70b_fwd_looped": {"fwd": [{}, dict(chunk=1024, num_warps=4), dict(chunk=2048, num_warps=8)]},
    # round 3: the looped forward with a prefetch of the next chunk in both passes, against round 2's
    # defaults (looped 2048 x 8 warps without it) and the one-block kernel
    "rmsnorm_70b_fwd_prefetch": {"fwd": _LOOPED_PREFETCH},
    "add_rmsnorm_70b_fwd_prefetch": {"fwd": _LOOPED_PREFETCH},
    "add_rmsnorm_fwd_prefetch": {"fwd": _LOOPED_PREFETCH[:3]},
    "softmax_vocab_check": _WIDE_CHECK,
    "softmax_256k_check": _WIDE_CHECK,
})  # fmt: skip
#: Forward A/B candidates against Liger (``--ab``): the default first, then capped-register variants (more
#: programs resident per SM; ptxas: at most 32 bytes of spills).
AB_VARIANTS = {"rmsnorm": [{}], "add_rmsnorm": [{}]}
# Round 1 (benchmarks/results/norms/2026-11-30_h200_fwd_0714.json) also ran capped-register variants, all slower at 8192x4096:
# RMSNorm 1 row x 8 warps at 32 registers 81.5 us, 2 rows x 16 warps at 32 registers 37.5 (default 33.8);
# add+RMSNorm 8 warps at 40 registers 66.2, 16 warps 66.2 (default 65.9). Now the (adopted) default only.
#: dW partial-sum reduction (P = 2 programs x 132 SMs rows): sum_partials keyword arguments.
PARTIAL_SUM_SWEEP = [dict(block_p=32, block_c=None, num_warps=4), dict(block_p=128, block_c=32, num_warps=4),
                     dict(block_p=64, block_c=64, num_warps=8), dict(block_p=256, block_c=16, num_warps=8),
                     dict(block_p=512, block_c=8, num_warps=8), dict(block_p=128, block_c=16, num_warps=4)]  # fmt: skip


def sweep_cases(op, dtype, device, key=None):
    """``[(kernel, config, call(config) -> outputs, bytes, fp32 references)]`` for one op's launcher sweep.

    The references are fp32 computations on the same (upcast) inputs the kernels get; the backward
    kernels get the saved statistics of the default forward."""
    e = torch.tensor([], dtype=dtype).element_size()
    M, N = op.shape
    acts, params, grads = make_inputs(op, dtype, device, 7)
    x, dy = acts[0], grads[0]
    up = lambda ts: [t.float().requires_grad_() for t in ts]  # noqa: E731
    cfgs = SWEEP.get(key or op.name) or (SWEEP["softmax_vocab"] if op.kind == "softmax" and N > 16384 else {})
    cases = []
    if op.kind in ("rmsnorm", "add_rmsnorm"):
        res = acts[1] if op.kind == "add_rmsnorm" else None
        ds = grads[1] if op.kind == "add_rmsnorm" else None
        w = params[0]
        _, s, rstd = rmsnorm_forward(x, w, residual=res)
        xs = s if s is not None else x
        k = 2 if res is not None else 1
        ref_fwd = as_tuple(op.reference(*[t.float() for t in acts], w.float()))
        ref_fwd = ref_fwd[::-1] if res is not None else ref_fwd  # launcher order: (y, s)
        xs32, w32 = up([xs, w])
        dx32, dw32 = torch.autograd.grad(hf_rmsnorm(xs32, w32), [xs32, w32], dy.float())
        ref_bwd = (dx32 + ds.float() if ds is not None else dx32, dw32)
        fwd_bytes = 2 * k * M * N * e + N * e + 4 * M
        bwd_bytes = (3 + (ds is not None)) * M * N * e + 4 * M + 2 * N * e
        fwd = lambda c: rmsnorm_forward(x, w, residual=res, **c)[: 2 if res is not None else 1]  # noqa: E731
        bwd = lambda c: rmsnorm_backward(dy, xs, w, rstd, ds=ds, **c)  # noqa: E731
    elif op.kind == "layernorm":
        _, mean, rstd = layernorm_forward(x, *params)
        ref_fwd = (F.layer_norm(x.float(), (N,), *[p.float() for p in params], EPS),)
        x32, w32, b32 = up([x, *params])
        ref_bwd = torch.autograd.grad(F.layer_norm(x32, (N,), w32, b32, EPS), [x32, w32, b32], dy.float())
        fwd_bytes, bwd_bytes = 2 * M * N * e + 2 * N * e + 8 * M, 3 * M * N * e + 8 * M + 3 * N * e
        fwd = lambda c: layernorm_forward(x, *params, EPS, **c)[:1]  # noqa: E731
        bwd = lambda c: layernorm_backward(dy, x, params[0], mean, rstd, **c)  # noqa: E731
    else:
        y = softmax_forward(x)
        ref_fwd = (torch.softmax(x.float(), -1),)
        y32 = y.float()
        ref_bwd = (y32 * (dy.float() - (y32 * dy.float()).sum(-1, keepdim=True)),)
        fwd_bytes, bwd_bytes = 2 * M * N * e, 3 * M * N * e
        fwd = lambda c: (softmax_forward(x, **c),)  # noqa: E731
        bwd = lambda c: (softmax_backward(dy, y, **c),)  # noqa: E731
    for kernel, call, nbytes, refs in (("fwd", fwd, fwd_bytes, ref_fwd), ("bwd", bwd, bwd_bytes, ref_bwd)):
        refs = tuple(r.detach() for r in refs)
        cases += [(kernel, c, call, nbytes, refs) for c in cfgs.get(kernel, [])]
    return cases


def variant_check(outs, refs) -> dict:
    """A sweep variant's outputs against fp32 references: finite, and max error at most 2^-6 of max|ref|
    (a few bf16 ulps at the largest value; the table rows apply the strict budget to the defaults)."""
    errs = [float((o.float() - r).abs().max()) for o, r in zip(outs, refs)]
    tols = [float(r.abs().max()) / 64 + 1e-6 for r in refs]
    finite = all(bool(torch.isfinite(o).all()) for o in outs)
    return {"ok": finite and all(e <= t for e, t in zip(errs, tols)), "max_abs_err": errs, "tol": tols}


def sweep(rec, ops, dtype, device, timing_kw, bw, args, key=None):
    """Time the solkit launchers alone over the SWEEP configs (fwd and bwd kernels separately), each
    checked first; a variant whose checked (second) call is slow (cooperative programs not all
    resident, waits running into their cap) is reported and not timed."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for op in ops:
        if elapsed() > args.sweep_budget_s:
            return
        try:
            cases = sweep_cases(op, dtype, device, key)
        except Exception as exc:  # noqa: BLE001
            rec.add("sweep", {"op": op.name, "error": f"setup: {type(exc).__name__}: {str(exc)[:200]}"})
            continue
        for kernel, cfg, call, nbytes, refs in cases:
            if elapsed() > args.sweep_budget_s:
                return
            row = {"op": op.name, "shape": list(op.shape), "kernel": kernel, "config": cfg, "bytes": nbytes}
            try:
                call(cfg)  # compiles
                poison_free_memory(4 * nbytes, device)
                sync()
                t0 = time.perf_counter()
                outs = call(cfg)
                sync()
                row["checked_call_s"] = round(time.perf_counter() - t0, 4)
                row.update(variant_check(outs, refs))
                del outs
                if device.type == "cuda" and row["checked_call_s"] > 0.5:
                    raise RuntimeError("a call took over 0.5 s (cooperative waits timing out?); not timed")
                kw = {**timing_kw, "calls_per_graph": calls_for(nbytes, timing_kw)}
                r = benchmark(lambda c=cfg, f=call: f(c), **kw)
                row.update({"median_ms": r.median_ms, "q1_ms": r.q1_ms, "q3_ms": r.q3_ms, "cv": r.cv,
                            "method": r.method})  # fmt: skip
                if device.type == "cuda":
                    row.update(sol_cols(nbytes, r.median_ms, bw))
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rec.add("sweep", row)
            print(f"[{elapsed():6.1f}s] sweep {op.name:14s} {kernel} {cfg} ok={row.get('ok')} "
                  f"us={row.get('median_ms', float('nan')) * 1e3:.1f} "
                  f"sol={row.get('sol_calibrated', float('nan')):.3f} {row.get('error', '')[:80]}",
                  flush=True)  # fmt: skip


def adopt_wide_softmax(rec) -> None:
    """Set the wide-row softmax defaults (``SPLIT_CONFIG``) in this process to the sweep's fastest
    checked choice per direction, by total time over the wide shapes measured; the table rows that
    follow then measure exactly that configuration, and the JSON records it (``adopted``)."""
    from solkit.kernels.softmax import dispatch as sm

    for kernel, direction in (("fwd", "fwd"), ("bwd", "bwd")):
        totals = {}
        for r in rec.doc["sweep"]:
            if r["op"].startswith("softmax_") and r.get("kernel") == kernel and r.get("ok") and "median_ms" in r:
                cfg = r["config"]
                if cfg.get("coop"):
                    continue
                key = json.dumps(cfg.get("split") if cfg.get("split") else "looped", sort_keys=True)
                totals.setdefault(key, []).append(r["median_ms"])
        n_shapes = max((len(v) for v in totals.values()), default=0)
        complete = {k: sum(v) for k, v in totals.items() if len(v) == n_shapes}
        if not complete:
            continue
        best = json.loads(min(complete, key=complete.get))
        if best == "looped":
            sm.SPLIT_CONFIG[direction]["default"] = False
        else:
            sm.SPLIT_CONFIG[direction].update(best, default=True)
        rec.doc.setdefault("adopted", {})[direction] = {"split_config": dict(sm.SPLIT_CONFIG[direction]),
                                                         "total_ms": complete}  # fmt: skip
        print(f"adopted wide softmax {direction}: {sm.SPLIT_CONFIG[direction]}", flush=True)


def partial_sum_sweep(rec, dtype, device, timing_kw, bw, args) -> None:
    """The dW (and dB) partial-sum reduction alone: [2 x SMs, N] fp32 buffers, N = 4096 and 8192."""
    for n_cols in (4096, 8192):
        part = torch.randn(2 * sm_count(torch.empty(0, device=device)), n_cols, device=device)
        ref = part.double().sum(0)
        nbytes = part.numel() * 4 + n_cols * torch.tensor([], dtype=dtype).element_size()
        for cfg in PARTIAL_SUM_SWEEP:
            if elapsed() > args.sweep_budget_s:
                return
            row = {"op": f"sum_partials_{part.shape[0]}x{n_cols}", "kernel": "reduce", "config": cfg, "bytes": nbytes}
            try:
                out = sum_partials(part, dtype, **cfg)
                row["ok"] = bool(torch.allclose(out.double(), ref, rtol=1e-2, atol=1e-2))
                r = benchmark(lambda c=cfg, t=part: sum_partials(t, dtype, **c), **timing_kw)
                row.update({"median_ms": r.median_ms, "cv": r.cv, "method": r.method})
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rec.add("sweep", row)
            print(f"[{elapsed():6.1f}s] sweep {row['op']} {cfg} ok={row.get('ok')} "
                  f"us={row.get('median_ms', float('nan')) * 1e3:.2f}", flush=True)  # fmt: skip


def ab_compare(rec, ops, variants: dict, liger: dict, dtype, device, timing_kw, bw, rounds: int,
               with_compile: bool = False) -> None:  # fmt: skip
    """Forward A/B runs: solkit launcher variants and Liger timed in alternation, ``rounds`` times each
    (one trial of the timing protocol per turn, the order rotated every round), so that clock drift and
    neighbours hit every candidate alike. Records each turn's median, then per candidate the median of
    the turn medians, its range, and the paired ratio to Liger per round (min, median, max): a ratio
    below 1 in every round is a measurable win, a median within the rounds' spread a tie."""
    for op in ops:
        if op.kind not in ("rmsnorm", "add_rmsnorm"):
            continue
        acts, params, _ = make_inputs(op, dtype, device, 11)
        res = acts[1] if op.kind == "add_rmsnorm" else None
        w = params[0]
        cands = {f"solkit{json.dumps(c, sort_keys=True)}": (lambda x, r, c=c, w=w: rmsnorm_forward(
            x, w, EPS, residual=r, save_rstd=False, **c)) for c in variants.get(op.kind, [{}])}  # fmt: skip
        lig = liger.get(op.kind)
        if lig is not None:
            cands["liger"] = (
                (lambda x, r, f=lig, w=w: f(x, r, w)) if res is not None else (lambda x, r, f=lig, w=w: f(x, w))
            )
        if with_compile:  # torch.compile of the eager baseline (outputs in the reference's order, as Liger's)
            comp = torch.compile(op.impls["torch"], dynamic=False)
            cands["compile"] = (lambda x, r, f=comp, w=w: f(x, r, w)) if res is not None else (
                lambda x, r, f=comp, w=w: f(x, w))  # fmt: skip
        pool = [tuple(make_inputs(op, dtype, device, 50 + k)[0]) + ((None,) if res is None else ()) for k in range(2)]
        ref = as_tuple(op.reference(*[t.float() for t in acts], w.float()))
        ok = {}
        for name, fn in cands.items():
            with torch.no_grad():
                out = as_tuple(fn(acts[0], res))
            if name.startswith("solkit"):  # launcher order (y, s, rstd); the reference's (s, y)
                out = out[:2][::-1] if res is not None else out[:1]
            errs = [float((o.float() - r).abs().max()) for o, r in zip(out, ref)]
            ok[name] = all(e <= float(r.abs().max()) / 64 for e, r in zip(errs, ref))
        turns = {name: [] for name in cands}
        names = list(cands)
        with torch.no_grad():
            for k in range(rounds):
                for name in names[k % len(names) :] + names[: k % len(names)]:
                    r = benchmark(cands[name], pool, **{**timing_kw, "trials": 1})
                    turns[name].append(r.median_ms)
        for name, ms in turns.items():
            srt = sorted(ms)
            row = {"op": op.name, "shape": list(op.shape), "kernel": "fwd_ab", "config": name, "ok": ok[name],
                   "bytes": op.bytes_fwd, "median_ms": srt[len(srt) // 2], "min_ms": srt[0], "max_ms": srt[-1],
                   "turn_ms": ms, "rounds": rounds, "method": r.method}  # fmt: skip
            for rival in ("liger", "compile"):
                if rival in turns and rival != name:
                    ratios = sorted(a / b for a, b in zip(ms, turns[rival]))
                    row[f"ratio_to_{rival}"] = {"min": ratios[0], "median": ratios[len(ratios) // 2], "max": ratios[-1]}
            if device.type == "cuda":
                row.update(sol_cols(op.bytes_fwd, row["median_ms"], bw))
            rec.add("sweep", row)
            rel = " ".join(f"vs {k[9:]} {v['min']:.3f}/{v['median']:.3f}/{v['max']:.3f}" for k, v in row.items()
                           if k.startswith("ratio_to_"))  # fmt: skip
            print(f"[{elapsed():6.1f}s] ab {op.name} {name} ok={ok[name]} us={row['median_ms'] * 1e3:.2f} "
                  f"[{srt[0] * 1e3:.2f}, {srt[-1] * 1e3:.2f}] {rel}", flush=True)  # fmt: skip


def adopt_norm_fwd(rec) -> None:
    """Set the RMSNorm / add+RMSNorm forward defaults in this process to the sweep's fastest checked
    choice between the one-block default (``{}``) and the looped variants (``chunk``), per op and width,
    so the table rows that follow measure it; the JSON records the choice (``adopted``)."""
    from solkit.kernels.norms import rms_norm as rn

    for op, kind, width in (("rmsnorm", "fwd", 4096), ("add_rmsnorm", "fwd_residual", 4096),
                            ("rmsnorm_70b", "fwd", 8192), ("add_rmsnorm_70b", "fwd_residual", 8192)):  # fmt: skip
        rows = [r for r in rec.doc["sweep"] if r.get("op") == op and r.get("kernel") == "fwd" and r.get("ok")
                and "median_ms" in r and (r["config"] == {} or "chunk" in r["config"])]  # fmt: skip
        if not rows:
            continue
        best = min(rows, key=lambda r: r["median_ms"])
        target = rn.RMSNORM_CONFIG["by_width"][width][kind] if width in rn.RMSNORM_CONFIG["by_width"] else (
            rn.RMSNORM_CONFIG[kind])  # fmt: skip
        c = best["config"]
        if c.get("chunk"):
            target.update(chunk=c["chunk"], looped_num_warps=c.get("num_warps", 4),
                          looped_prefetch=bool(c.get("looped_prefetch", False)))  # fmt: skip
        elif "chunk" in c:  # chunk 0: the one-block kernel
            target.update(chunk=0, **({"num_warps": c["num_warps"]} if "num_warps" in c else {}))
        rec.doc.setdefault("adopted", {})[f"{op}_fwd"] = {
            "config": best["config"], "median_ms": best["median_ms"],
            "candidates_ms": {json.dumps(r["config"], sort_keys=True): r["median_ms"] for r in rows},
        }  # fmt: skip
        print(f"adopted {op} forward: {best['config']} ({best['median_ms'] * 1e3:.1f} us)", flush=True)
