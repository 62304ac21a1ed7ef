"""``solkit sol``: the speed-of-light calculator."""

from __future__ import annotations

import argparse

from solkit.errors import SolkitError
from solkit.output import console, print_json, table


def _nonneg_float(text: str) -> float:
    """A count or a size: a number, or arithmetic on numbers (``2*4096*4096*4096``, ``4096**2 * 2``)."""
    from solkit.problems.expr import ExprError, evaluate

    try:
        value = float(text)
    except ValueError:
        try:
            value = evaluate(text, {})
        except (ExprError, OverflowError) as exc:
            raise argparse.ArgumentTypeError(
                f"expected a number or arithmetic on numbers, got {text!r} ({exc})"
            ) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        try:
            value = float(value)
        except OverflowError:
            raise argparse.ArgumentTypeError(f"{text!r} is too large") from None
    if value < 0 or value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _pos_float(text: str) -> float:
    value = _nonneg_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sol",
        help="T_SOL, bound and (with --time-ms) SOL fraction and MFU for given FLOPs and bytes",
        description="T_SOL = max(FLOPs / compute peak, bytes / bandwidth), on the datasheet (spec) or measured "
        "(calibrated) basis.",
    )
    p.add_argument("--flops", type=_nonneg_float, default=0.0,
                   help="total FLOPs, a number or arithmetic (e.g. 2*8192*4096*4096 for a GEMM)")  # fmt: skip
    p.add_argument("--bytes", type=_nonneg_float, default=0.0,
                   help="fused bytes moved (inputs read + outputs written), a number or arithmetic")  # fmt: skip
    p.add_argument("--dtype", default="bf16", help="dtype of the math: fp64, fp32, tf32, bf16, fp16, fp8, int8, fp4")
    p.add_argument("--unit", choices=["tensor", "vector"], default=None,
                   help="math unit (default: tensor, except fp32 which defaults to the vector unit)")  # fmt: skip
    p.add_argument("--arch", default=None, help="arch id (default: the present device); see `solkit hw list`")
    p.add_argument("--basis", default="spec", help="spec (datasheet) or calibrated (measured on this device)")
    p.add_argument("--time-ms", type=_pos_float, default=None, help="a measured time, to score against T_SOL")
    p.add_argument("--baseline-ms", type=_pos_float, default=None, help="a baseline time, for the anchored score")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sol)


def unit_for(dtype: str, unit: str | None) -> str:
    from solkit.hardware.specs import DTYPE_TO_TENSOR_UNIT, resolve_dtype

    d = resolve_dtype(dtype)
    if unit == "vector":
        if d not in ("fp64", "fp32"):
            raise SolkitError(f"no vector unit is modelled for {d}; allowed with --unit vector: fp64, fp32")
        return f"{d}_vector"
    if unit == "tensor" and d == "fp32":
        return "tf32_tensor"
    return DTYPE_TO_TENSOR_UNIT[d]


def compute(args: argparse.Namespace) -> dict:
    from solkit.sol.ceilings import get_ceilings
    from solkit.sol.model import anchored_score, bandwidth_utilization, mfu, sol_fraction, t_sol
    from solkit.sol.tiers import tier_for

    if not args.flops and not args.bytes:
        raise SolkitError("--flops / --bytes: give the work of the operation (at least one of them above 0)")
    if args.basis not in ("spec", "calibrated"):
        raise SolkitError(f"unknown basis {args.basis!r}; allowed: calibrated, spec")
    unit = unit_for(args.dtype, args.unit)
    ceilings = get_ceilings(args.arch, args.basis)
    res = t_sol({unit: args.flops} if args.flops else {}, args.bytes, ceilings)
    out = {
        "arch": ceilings.arch,
        "basis": ceilings.basis,
        "unit": unit,
        "flops": args.flops,
        "bytes": args.bytes,
        "peak_flops": ceilings.peak(unit),
        "bandwidth": ceilings.bandwidth,
        "t_sol_ms": res.t_sol_ms,
        "t_compute_ms": res.t_compute_s * 1e3,
        "t_memory_ms": res.t_memory_s * 1e3,
        "bound": res.bound,
        "arithmetic_intensity": res.arithmetic_intensity if args.bytes else None,
        "ridge_point": ceilings.peak(unit) / ceilings.bandwidth,
        "notes": list(ceilings.notes),
    }
    if args.time_ms is not None:
        score = sol_fraction(res.t_sol_s, args.time_ms * 1e-3)
        out["time_ms"] = args.time_ms
        out["sol_fraction"] = score.sol_fraction
        out["sol_violation"] = score.violation
        if args.flops:
            out["mfu"] = mfu(args.flops, args.time_ms * 1e-3, ceilings.peak(unit))
        if args.bytes:
            out["bandwidth_utilization"] = bandwidth_utilization(args.bytes, args.time_ms * 1e-3, ceilings.bandwidth)
        t = tier_for(score.sol_fraction, res.bound)
        out["tier"] = {"name": t.name, "label": t.label, "advice": t.advice}
        if args.baseline_ms is not None:
            out["anchored_score"] = anchored_score(args.time_ms * 1e-3, args.baseline_ms * 1e-3, res.t_sol_s)
    return out


def cmd_sol(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.json:
        print_json(out)
        return 0
    rows = [[k, v] for k, v in out.items() if k not in ("notes", "tier")]
    if "tier" in out:
        rows.append(["tier", f"{out['tier']['label']}: {out['tier']['advice']}"])
    console.print(table(f"speed of light on {out['arch']} ({out['basis']} basis)", ["quantity", "value"], rows))
    if out.get("sol_violation"):
        console.print("[red]SOL violation:[/red] the measured time is below T_SOL; the model or the timer is wrong.")
    for n in out["notes"]:
        console.print(f"note: {n}")
    return 0
