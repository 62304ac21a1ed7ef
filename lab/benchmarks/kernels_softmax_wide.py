"""Wide-row softmax (vocabulary widths, and the 14336 intermediate) on the H200: solkit's paths, Liger, torch.compile.

Variants are solkit launch settings (``packed`` = :mod:`solkit.kernels.softmax.packed`; ``looped``, ``split``
and ``default`` = the other paths of :mod:`solkit.kernels.softmax.dispatch`) or rivals (``liger``, ``compile``,
``eager``). Per shape one bf16 input ``x = 4 randn`` and one ``dy = randn``; every variant is first checked
against a float64 reference over every row (output and gradient: max error at most twice eager PyTorch's own
bf16 error + ``1e-3 max|ref|``, no NaN; the output buffers poisoned with NaN before), then timed with
``solkit.harness.timing.benchmark(method="auto", l2_flush_mode="read")`` (CUDA events, per-call events in a
CUDA graph for calls under 0.1 ms), two rotating input sets. Modes: ``fwd`` (bytes ``2MNe``), ``bwd`` (the
backward alone, ``3MNe``) and ``fwdbwd`` (``5MNe``). SOL against the copy bandwidth measured in the same
run (calibrated) and the 4.8 TB/s datasheet.

    python3 kernels_softmax_wide.py --warm 0/4             # compile a quarter of the variants (tiny rows)
    python3 kernels_softmax_wide.py --warm-compile         # torch.compile (max-autotune) of the rival shapes
    python3 kernels_softmax_wide.py --plan round1 --out r.json --budget-s 90
    python3 kernels_softmax_wide.py --plan smoke --smoke   # CPU interpreter, tiny shapes: logic check only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from softmax_wide_plans import ALL3, COMPILE_SHAPES, DIAG, FLOORS, PLANS, RIVALS, SHAPES, VARIANTS  # noqa: E402, F401

from solkit.kernels.softmax.dispatch import softmax_backward, softmax_forward  # noqa: E402
from solkit.sol.model import Ceilings, sol_fraction, t_sol  # noqa: E402
from solkit.timing import benchmark  # noqa: E402

DATASHEET_BW = 4.8e12
T0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - T0


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ callables
def solkit_fns(name: str):
    fo, bo = VARIANTS[name]
    fwd = (lambda x: softmax_forward(x, **fo)) if fo is not None else None
    bwd = (lambda dy, y: softmax_backward(dy, y, **bo)) if bo is not None else None
    return fwd, bwd


_COMPILED = {}


def rival_fns(name: str):
    """(forward, forward+backward through autograd) of a rival."""
    if name == "liger":
        from liger_kernel.ops import LigerSoftmaxFunction

        f = LigerSoftmaxFunction.apply
    elif name == "compile":
        if "f" not in _COMPILED:
            _COMPILED["f"] = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False,
                                           mode="max-autotune-no-cudagraphs")  # fmt: skip
        f = _COMPILED["f"]
    else:
        f = lambda x: torch.softmax(x, -1)  # noqa: E731

    def fwdbwd(x, dy):
        xg = x.detach().requires_grad_()
        return torch.autograd.grad(f(xg), xg, dy)[0]

    return f, fwdbwd


def run_mode(name: str, mode: str, x, dy, y_in):
    """The variant's output for a mode: y (fwd), dx from the given y (bwd), dx (fwdbwd)."""
    if name in RIVALS:
        f, fb = rival_fns(name)
        if mode == "fwd":
            with torch.no_grad():
                return f(x)
        if mode == "fwdbwd":
            return fb(x, dy)
        return None
    fwd, bwd = solkit_fns(name)
    if mode == "fwd":
        return fwd(x)
    if mode == "bwd":
        return bwd(dy, y_in)
    return bwd(dy, fwd(x)) if fwd is not None and bwd is not None else None


_COPY_DST: dict = {}


def timed(name: str, mode: str):
    if name in FLOORS:

        def copy(x, dy, y):
            if id(x) not in _COPY_DST:
                _COPY_DST[id(x)] = torch.empty_like(x)
            return _COPY_DST[id(x)].copy_(x)

        return copy
    if name in RIVALS:
        f, fb = rival_fns(name)
        if mode == "fwd":

            def run(x, dy, y):
                with torch.no_grad():
                    return f(x)

            return run
        return lambda x, dy, y: fb(x, dy)
    fwd, bwd = solkit_fns(name)
    if mode == "fwd":
        return lambda x, dy, y: fwd(x)
    if mode == "bwd":
        return lambda x, dy, y: bwd(dy, y)
    return lambda x, dy, y: bwd(dy, fwd(x))


# ----------------------------------------------------------------------------------------------- reference
class Reference:
    """A shape's inputs and float64 references: y, dx (from x) and dx from the bf16-rounded y (bwd mode),
    and eager PyTorch's own bf16 errors against them."""

    def __init__(self, shape, dtype, device, seed=0):
        gen = torch.Generator(device=device).manual_seed(seed)
        self.x = torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 4
        self.dy = torch.randn(*shape, device=device, dtype=dtype, generator=gen)
        y64 = torch.softmax(self.x.double(), -1)
        d64 = self.dy.double()
        self.y64 = y64
        self.dx64 = y64 * (d64 - (y64 * d64).sum(-1, keepdim=True))
        self.y_in = torch.softmax(self.x, -1)  # the y given to the backward alone (bf16)
        yb = self.y_in.double()
        self.dxb64 = yb * (d64 - (yb * d64).sum(-1, keepdim=True))
        xe = self.x.clone().requires_grad_()
        ye = torch.softmax(xe, -1)
        (dxe,) = torch.autograd.grad(ye, xe, self.dy)
        dxe_b = torch._softmax_backward_data(self.dy, self.y_in, -1, dtype)
        self.torch_err = {"fwd": _err(ye.detach(), y64), "fwdbwd": _err(dxe, self.dx64), "bwd": _err(dxe_b, self.dxb64)}
        self.ref = {"fwd": y64, "fwdbwd": self.dx64, "bwd": self.dxb64}
        self.ref_max = {k: float(v.abs().max()) for k, v in self.ref.items()}
        del xe, ye, dxe, dxe_b


def _err(out, ref64) -> float:
    return float((out.double() - ref64).abs().max())


def check(name, mode, ref: Reference) -> dict:
    if ref.x.is_cuda:  # poison the allocator's free blocks: an unwritten element shows as NaN
        t = torch.empty(3 * ref.x.numel() * ref.x.element_size(), dtype=torch.uint8, device=ref.x.device)
        t.fill_(255)
        del t
    out = run_mode(name, mode, ref.x, ref.dy, ref.y_in)
    if out is None:
        return {"ok": False, "error": "mode not available"}
    r = ref.ref[mode]
    nonfinite = not bool(torch.isfinite(out).all())
    diff = (out.double() - r).abs()
    err = float(diff.max())
    row_err = diff.amax(-1)
    budget = 2 * ref.torch_err[mode] + 1e-3 * ref.ref_max[mode]
    bad_rows = int((row_err > budget).sum()) + int((~torch.isfinite(out)).any(-1).sum())
    rel = float((out.double() - r).norm() / r.norm())
    return {"ok": (not nonfinite) and err <= budget, "max_abs_err": err, "err_budget": budget, "bad_rows": bad_rows,
            "torch_err": ref.torch_err[mode], "rel_l2_err": rel, "nonfinite": nonfinite}  # fmt: skip


def sol_cols(nbytes, ms, bw) -> dict:
    out = {"achieved_TBps": nbytes / (ms * 1e-3) / 1e12}
    for basis, b in (("calibrated", bw), ("datasheet", DATASHEET_BW)):
        if b:
            res = t_sol({}, nbytes, Ceilings("h200", basis, {}, b))
            score = sol_fraction(res.t_sol_s, ms * 1e-3)
            out[f"t_sol_ms_{basis}"] = res.t_sol_ms
            out[f"sol_{basis}"] = score.sol_fraction
            out[f"violation_{basis}"] = score.violation
    return out


def launch_facts(name, mode, ref) -> dict:
    """The packed launcher's facts (split, groups, registers, spills) for a solkit packed variant."""
    from solkit.kernels.softmax import packed as sp

    fo, bo = VARIANTS.get(name, (None, None))
    opts = fo if mode == "fwd" else bo
    if opts and isinstance(opts.get("tma"), dict) and mode == "fwd":
        from solkit.kernels.softmax.tma import softmax_forward_tma

        try:
            x = ref.x[:64]
            return softmax_forward_tma(x, torch.empty_like(x), **opts["tma"]) or {}
        except Exception as exc:  # noqa: BLE001
            return {"facts_error": str(exc)[:200]}
    if opts and isinstance(opts.get("reread"), dict) and mode == "fwd":
        from solkit.kernels.softmax.reread import softmax_forward_reread

        try:
            x = ref.x[:64]
            return softmax_forward_reread(x, torch.empty_like(x), **opts["reread"]) or {}
        except Exception as exc:  # noqa: BLE001
            return {"facts_error": str(exc)[:200]}
    if opts and isinstance(opts.get("rows"), dict) and mode == "fwd":
        from solkit.kernels.softmax.rows import softmax_forward_rows

        try:
            x = ref.x[:64]
            return softmax_forward_rows(x, torch.empty_like(x), **opts["rows"]) or {}
        except Exception as exc:  # noqa: BLE001
            return {"facts_error": str(exc)[:200]}
    if not opts or not isinstance(opts.get("packed"), dict):
        return {}
    try:
        x = ref.x[:64]
        if mode == "fwd":
            return sp.softmax_forward_packed(x, torch.empty_like(x), **opts["packed"]) or {}
        return sp.softmax_backward_packed(ref.dy[:64], ref.y_in[:64], torch.empty_like(x), **opts["packed"]) or {}
    except Exception as exc:  # noqa: BLE001
        return {"facts_error": str(exc)[:200]}


# ------------------------------------------------------------------------------------------------ main
def measure_copy(device, timing_kw) -> tuple[float, dict]:
    """Copy bandwidth (read + write bytes per second) of a 1 GiB ``copy_``, CUDA events (as ``solkit calibrate``)."""
    n = 2**29
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(40):
        dst.copy_(src)
    res = benchmark(lambda: dst.copy_(src), **{**timing_kw, "method": "events", "reps": 30})
    bw = 2 * src.numel() * 2 / (res.median_ms * 1e-3)
    return bw, res.to_dict()


def warm(part: str, device, plan: str) -> None:
    """Compile (Triton cache) the solkit variants of a plan on a few rows of each shape."""
    k, n = (int(v) for v in part.split("/"))
    jobs = sorted({(s, v, m) for s, vs in PLANS[plan] for v, ms in vs for m in ms if v not in RIVALS + FLOORS})
    for s, v, m in jobs[k::n]:
        rows, cols = SHAPES[s]
        x = torch.randn(min(rows, 528), cols, device=device, dtype=torch.bfloat16)
        try:
            run_mode(v, m, x, torch.randn_like(x), torch.softmax(x, -1))
        except Exception as exc:  # noqa: BLE001
            print(f"warm {s} {v} {m}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    torch.cuda.synchronize()
    log(f"warm {part}: {len(jobs[k::n])} done")


def warm_compile(device, plan: str) -> None:
    """torch.compile (max-autotune) of the plan's rival shapes, forward and forward + backward, alone on the GPU."""
    for s in COMPILE_SHAPES.get(plan, ()):
        x = torch.randn(*SHAPES[s], device=device, dtype=torch.bfloat16)
        run_mode("compile", "fwd", x, torch.randn_like(x), None)
        run_mode("compile", "fwdbwd", x, torch.randn_like(x), None)
        torch.cuda.synchronize()
        log(f"compiled {s}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", default="round1", choices=sorted(PLANS))
    p.add_argument("--out", default="")
    p.add_argument("--budget-s", type=float, default=1e9)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--warm", default="")
    p.add_argument("--warm-compile", action="store_true")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--command", default=" ".join(sys.argv))
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.warm:
        warm(args.warm, device, args.plan)
        return 0
    if args.warm_compile:
        warm_compile(device, args.plan)
        return 0
    timing_kw = (dict(method="wall", reps=2, trials=1, warmup=1) if device.type != "cuda"
                 else dict(method="auto", reps=args.reps, trials=3, warmup=3, calls_per_graph=10,
                           l2_flush_mode="read"))  # fmt: skip
    doc = {"benchmark": "kernels_softmax_wide", "plan": args.plan, "command": args.command,
           "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor(),
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "timing": timing_kw, "dtype": "bfloat16", "rows": []}  # fmt: skip
    try:
        import liger_kernel  # noqa: F401

        doc["versions"]["liger_kernel"] = getattr(liger_kernel, "__version__", "0.8.5")
    except ImportError:
        pass

    def flush():
        doc["elapsed_s"] = round(elapsed(), 1)
        if args.out:
            with open(args.out + ".tmp", "w") as fh:
                json.dump(doc, fh, indent=1, default=str)
            os.replace(args.out + ".tmp", args.out)

    bw = 0.0
    if device.type == "cuda":
        bw, info = measure_copy(device, timing_kw)
        doc["copy_bandwidth_Bps"], doc["copy_timing"] = bw, info
        log(f"copy bandwidth {bw / 1e12:.3f} TB/s")
    flush()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    for shape_name, variants in PLANS[args.plan]:
        if elapsed() > args.budget_s:
            break
        shape = SHAPES[shape_name]
        ref = Reference(shape, dtype, device)
        e = ref.x.element_size()
        M, N = shape
        pool = [(torch.randn(*shape, device=device, dtype=dtype) * 4, torch.randn(*shape, device=device, dtype=dtype))
                for _ in range(2)]  # fmt: skip
        pool = [(x, dy, torch.softmax(x, -1)) for x, dy in pool]
        _COPY_DST.clear()
        for name, modes in variants:
            for mode in modes:
                if elapsed() > args.budget_s:
                    break
                nbytes = {"fwd": 2, "bwd": 3, "fwdbwd": 5}[mode] * M * N * e
                row = {"shape_name": shape_name, "shape": [M, N], "variant": name, "mode": mode, "bytes": nbytes,
                       "options": VARIANTS.get(name, (None, None))[0 if mode == "fwd" else 1] if name in VARIANTS
                       else name}  # fmt: skip
                t = time.perf_counter()
                try:
                    if name in FLOORS:
                        row.update({"ok": None, "floor": True})
                    else:
                        row.update(check(name, mode, ref))
                    if (row["ok"] or name in DIAG or name in FLOORS) and device.type == "cuda":
                        res = benchmark(timed(name, mode), pool, **timing_kw)
                        row.update({"median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms, "cv": res.cv,
                                    "method": res.method, "l2_flush_mode": timing_kw.get("l2_flush_mode"),
                                    **sol_cols(nbytes, res.median_ms, bw)})  # fmt: skip
                        row["launch"] = launch_facts(name, mode, ref)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a row, never a crash
                    row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                    traceback.print_exc(limit=2)
                row["wall_s"] = round(time.perf_counter() - t, 2)
                doc["rows"].append(row)
                flush()
                ms = row.get("median_ms", float("nan"))
                log(f"{shape_name:8s} {name:12s} {mode:6s} ok={row.get('ok')} ms={ms:.4f} "
                    f"sol={row.get('sol_calibrated', float('nan')):.3f} err={row.get('max_abs_err', float('nan')):.2e}"
                    f"/{row.get('err_budget', float('nan')):.2e} {row.get('error', '')[:100]}")  # fmt: skip
        del ref, pool
        if device.type == "cuda":
            torch.cuda.empty_cache()
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
