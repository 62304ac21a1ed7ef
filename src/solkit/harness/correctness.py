"""Output checks: structure, shape, dtype, and the tolerance rule, with explicit non-finite handling.

Rule (SOL-ExecBench's): an element matches when ``|out - ref| <= atol + rtol * |ref|``. solkit
differences, all deliberate:

* every element must match by default (``required_matched_ratio = 1.0``) unless the workload sets
  the ratio explicitly or the caller overrides it;
* non-finite values are handled explicitly: a reference NaN makes the reference invalid (caller's
  job, see :func:`reference_problem`); a reference ±inf matches only the same infinity; a candidate
  NaN, or an infinity where the reference is finite, is a mismatch and always fails, whatever the
  ratio;
* errors are reported over the positions where both sides are finite (plus ``has_nan``/``has_inf``
  for the candidate), with the relative error ``|Δ| / max(|ref|, atol)`` as in SOL-ExecBench, and the
  normwise error ``‖Δ‖₂ / ‖ref‖₂``;
* a constant output is rejected when the reference is not constant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from solkit.problems.schema import ToleranceSpec

_BIG = 1 << 27  # above this many elements, a device comparison runs in float32 to bound the memory used
#: A CPU comparison runs over slices of this many elements, in float64 whatever the size: its temporaries stay in
#: the cache (several times faster on outputs of millions of elements than whole-tensor temporaries, and the memory
#: it takes is bounded), with the same matches, maxima and flags; only the norms' rounding may differ.
CPU_SLICE = 1 << 18


class OutputFormatError(ValueError):
    """The candidate returned something that cannot be matched to the definition's outputs."""


@dataclass
class OutputCheck:
    """The result of comparing one output (or, merged, all outputs of all trials)."""

    ok: bool = True
    status: str | None = None  # failing status when not ok
    reason: str = ""
    max_absolute_error: float = 0.0
    max_relative_error: float = 0.0
    l2_relative_error: float = 0.0
    has_nan: bool = False
    has_inf: bool = False
    mismatches: int = 0
    numel: int = 0

    @property
    def matched_ratio(self) -> float:
        return 1.0 - self.mismatches / self.numel if self.numel else 1.0

    def merge(self, other: OutputCheck) -> OutputCheck:
        """Worst of both (first failure kept)."""
        first_fail = self if not self.ok else other
        return OutputCheck(
            ok=self.ok and other.ok,
            status=first_fail.status if not (self.ok and other.ok) else None,
            reason=first_fail.reason if not (self.ok and other.ok) else "",
            max_absolute_error=max(self.max_absolute_error, other.max_absolute_error),
            max_relative_error=max(self.max_relative_error, other.max_relative_error),
            l2_relative_error=max(self.l2_relative_error, other.l2_relative_error),
            has_nan=self.has_nan or other.has_nan,
            has_inf=self.has_inf or other.has_inf,
            mismatches=self.mismatches + other.mismatches,
            numel=self.numel + other.numel,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["matched_ratio"] = self.matched_ratio
        return d


def required_ratio(tol: ToleranceSpec, override: float | None = None) -> float:
    """solkit's matched-ratio policy: the override, else the workload's explicit ratio, else 1.0."""
    if override is not None:
        return float(override)
    return float(tol.required_matched_ratio) if tol.explicit_matched_ratio else 1.0


def normalize_outputs(result: Any, names: Sequence[str]) -> dict[str, Any]:
    """Map a return-style result (tensor, tuple/list, dict, scalar) onto the output names."""
    if isinstance(result, Mapping):
        missing = [n for n in names if n not in result]
        if missing:
            raise OutputFormatError(f"returned dict lacks outputs {missing}")
        return {n: result[n] for n in names}
    if isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise OutputFormatError(f"returned {len(result)} values, definition has {len(names)} outputs {list(names)}")
        return dict(zip(names, result))
    if len(names) != 1:
        raise OutputFormatError(f"returned one value, definition has {len(names)} outputs {list(names)}")
    if result is None:
        raise OutputFormatError("returned None (a non-DPS solution must return its outputs)")
    return {names[0]: result}


def _as_tensor(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.tensor(x)


def compare(ref: Any, out: Any, tol: ToleranceSpec, ratio: float, name: str = "output") -> OutputCheck:
    """Compare one candidate output with the reference output (shape, dtype, then values)."""
    ref_t = _as_tensor(ref)
    if isinstance(ref, torch.Tensor) and not isinstance(out, torch.Tensor):
        return OutputCheck(False, "INCORRECT_SHAPE", f"{name}: returned {type(out).__name__}, expected a tensor")
    out_t = _as_tensor(out)
    if tuple(out_t.shape) != tuple(ref_t.shape):
        return OutputCheck(False, "INCORRECT_SHAPE", f"{name}: shape {tuple(out_t.shape)} != {tuple(ref_t.shape)}")
    if isinstance(ref, torch.Tensor) and out_t.dtype != ref_t.dtype:
        return OutputCheck(False, "INCORRECT_DTYPE", f"{name}: dtype {out_t.dtype} != {ref_t.dtype}")
    numel = ref_t.numel()
    if numel == 0:
        return OutputCheck(numel=0)
    if out_t.device != ref_t.device:  # compare where the candidate's output lives (the GPU, usually)
        ref_t = ref_t.to(out_t.device)
    if ref_t.dtype.itemsize == 1 and ref_t.dtype.is_floating_point and not _castable(ref_t):  # packed fp4: bitwise
        bad = int((out_t.view(torch.uint8) != ref_t.view(torch.uint8)).sum())
        return _finish(OutputCheck(mismatches=bad, numel=numel), tol, ratio, name, math.inf if bad else 0.0)
    atol, rtol = float(tol.max_atol), float(tol.max_rtol)
    rf, of = ref_t.detach().reshape(-1), out_t.detach().reshape(-1)
    if ref_t.device.type == "cpu" and numel > CPU_SLICE:
        # one slice converted at a time
        pieces = ((rf[i : i + CPU_SLICE].to(torch.float64), of[i : i + CPU_SLICE].to(torch.float64))
                  for i in range(0, numel, CPU_SLICE))  # fmt: skip
    else:
        work = torch.float64 if numel <= _BIG else torch.float32
        pieces = iter([(rf.to(work), of.to(work))])
    check = OutputCheck(numel=numel)
    ref_norms, diff_norms = [], []
    for r, o in pieces:
        part = _piece(r, o, atol, rtol)
        check.mismatches += part["mismatches"]
        check.has_nan = check.has_nan or part["has_nan"]
        check.has_inf = check.has_inf or part["has_inf"]
        check.max_absolute_error = max(check.max_absolute_error, part["max_abs"])
        check.max_relative_error = max(check.max_relative_error, part["max_rel"])
        ref_norms.append(part["ref_norm"])
        diff_norms.append(part["diff_norm"])
    ref_norm, diff_norm = math.hypot(*ref_norms), math.hypot(*diff_norms)  # one piece: its norm, exactly
    check.l2_relative_error = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    return _finish(check, tol, ratio, name, check.max_absolute_error)


def _piece(r: torch.Tensor, o: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    """The tolerance rule on one piece of the flattened outputs (see the module docstring)."""
    r_fin, o_fin = torch.isfinite(r), torch.isfinite(o)
    both = r_fin & o_fin
    diff = torch.where(both, (o - r).abs(), torch.zeros_like(r))
    ok_finite = both & (diff <= atol + rtol * r.abs())
    inf_match = torch.isinf(r) & (o == r)
    matched = ok_finite | inf_match
    out = {"mismatches": int(r.numel() - matched.sum()), "has_nan": bool(torch.isnan(o).any()),
           "has_inf": bool((torch.isinf(o) & ~torch.isinf(r)).any()), "max_abs": 0.0, "max_rel": 0.0,
           "ref_norm": 0.0, "diff_norm": 0.0}  # fmt: skip
    if both.any():
        out["max_abs"] = float(diff.max())
        denom = r.abs().clamp(min=max(atol, 1e-12))
        out["max_rel"] = float(torch.where(both, diff / denom, torch.zeros_like(r)).max())
        out["ref_norm"] = float(torch.where(both, r, torch.zeros_like(r)).norm())
        out["diff_norm"] = float(diff.norm())
    return out


def _castable(t: torch.Tensor) -> bool:
    try:
        t.reshape(-1)[:1].to(torch.float32)
        return True
    except (RuntimeError, TypeError):
        return False


def _finish(check: OutputCheck, tol: ToleranceSpec, ratio: float, name: str, max_abs: float) -> OutputCheck:
    if check.has_nan or check.has_inf:
        kind = "NaN" if check.has_nan else "Inf where the reference is finite"
        check.ok, check.status = False, "INCORRECT_NUMERICAL"
        check.reason = f"{name}: output contains {kind}"
    elif check.matched_ratio < ratio:
        check.ok, check.status = False, "INCORRECT_NUMERICAL"
        check.reason = (
            f"{name}: {check.mismatches} of {check.numel} elements outside atol={tol.max_atol} rtol={tol.max_rtol} "
            f"(matched {check.matched_ratio:.6f} < required {ratio}); max |Δ| = {max_abs:.4g}"
        )
    elif tol.max_error_cap is not None and max_abs > tol.max_error_cap:
        check.ok, check.status = False, "INCORRECT_NUMERICAL"
        check.reason = f"{name}: max |Δ| = {max_abs:.4g} exceeds max_error_cap {tol.max_error_cap}"
    return check


def is_constant(x: Any) -> bool:
    """True when a tensor with more than one element holds one value everywhere (NaN counts as a value)."""
    if not isinstance(x, torch.Tensor) or x.numel() <= 1:
        return False
    flat = x.detach().reshape(-1)
    first = flat[:1]
    if flat.dtype.is_floating_point and bool(torch.isnan(first).all()):
        return bool(torch.isnan(flat).all())
    return bool((flat == first).all())


def bitwise_equal(a: Any, b: Any) -> bool:
    """Exact equality of two values, bit for bit (NaN-safe), on any device."""
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if b.device != a.device:
        b = b.to(a.device)
    return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8))


def reference_problem(outputs: Mapping[str, Any]) -> str | None:
    """Why reference outputs cannot serve as ground truth (NaN anywhere), or None."""
    for name, v in outputs.items():
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point and _castable(v) and bool(torch.isnan(v).any()):
            return f"reference output {name!r} contains NaN"
        if isinstance(v, float) and math.isnan(v):
            return f"reference output {name!r} is NaN"
    return None
