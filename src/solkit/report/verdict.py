"""What a reader may conclude from a bench row, and from two runs of it.

Every measured row gets one verdict:

* ``incorrect`` / ``error`` / ``unavailable``: the row was not timed as a correct implementation;
* ``violation``: the time is below T_SOL on some basis, so either the ceilings or the work model is wrong
  (the SOL fraction is capped at 1 and must not be read as "at the speed of light");
* ``noisy``: the timing's coefficient of variation is above :data:`NOISY_CV`, so the median is not a number to
  compare (wall-clock timing on a busy CPU easily varies by 10x between calls);
* ``ok``: none of the above.

Comparisons (``solkit report a b``) use only rows that are ``ok`` in both runs, and call a change a speed-up or
a slow-down only when the 95 % confidence interval of the time ratio excludes 1.0. results.json keeps the median
of each timing trial (``timing.trial_medians_ms``, three by default), so the interval is Welch's t-interval on the
logarithms of those per-trial medians: with three trials per run it is wide unless the runs are steady.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

#: Rows whose timing has a coefficient of variation above this are ``noisy`` (10 %: twice timing's own warning).
NOISY_CV = 0.10

VERDICTS = ("ok", "noisy", "violation", "incorrect", "error", "unavailable")

#: What each verdict means, for the legends of the terminal table, report.md and report.html.
LEGEND = {
    "ok": "correct, steady timing, not faster than the speed of light",
    "noisy": f"timing varies too much to trust (cv > {NOISY_CV:.0%}); kept out of comparisons",
    "violation": "faster than T_SOL: the ceilings or the work model are wrong; the SOL fraction is not a score",
    "incorrect": "outputs differ from the reference beyond tolerance",
    "error": "the backend raised",
    "unavailable": "no implementation runs here",
}

# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
        2.042)  # fmt: skip


def cv_of(row: dict[str, Any]) -> float | None:
    t = row.get("timing") or {}
    return t.get("cv")


def verdict(row: dict[str, Any]) -> str:
    """The one word a row shows: ok, noisy, violation, incorrect (or error / unavailable)."""
    status = row.get("status") or "error"
    if status != "ok":
        return status
    if row.get("sol_violation"):
        return "violation"
    cv = cv_of(row)
    if cv is not None and cv > NOISY_CV:
        return "noisy"
    return "ok"


def t95(df: float) -> float:
    k = max(int(math.floor(df)), 1)
    return _T95[k - 1] if k <= len(_T95) else 1.96


def ratio_interval(a_ms: list[float], b_ms: list[float]) -> tuple[float, float] | None:
    """95 % interval of (time a) / (time b) from per-trial medians: Welch's t on the logs; None below 2 trials."""
    if len(a_ms) < 2 or len(b_ms) < 2 or min(a_ms + b_ms) <= 0:
        return None
    la, lb = [math.log(x) for x in a_ms], [math.log(x) for x in b_ms]
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    diff = statistics.fmean(la) - statistics.fmean(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(diff), math.exp(diff)
    df = (va + vb) ** 2 / ((va**2) / (len(la) - 1) + (vb**2) / (len(lb) - 1))
    half = t95(df) * se
    return math.exp(diff - half), math.exp(diff + half)


def trial_medians(row: dict[str, Any]) -> list[float]:
    return list((row.get("timing") or {}).get("trial_medians_ms") or [])


def compare_verdict(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, tuple[float, float] | None]:
    """How run b's row stands against run a's: faster, slower, same (the interval holds 1.0), or why not compared."""
    va, vb = verdict(a), verdict(b)
    if va != "ok" or vb != "ok":
        return f"not compared (a {va}, b {vb})", None
    ci = ratio_interval(trial_medians(a), trial_medians(b))
    if ci is None:
        return "not compared (fewer than 2 timing trials)", None
    lo, hi = ci
    if lo > 1.0:
        return "faster", ci
    if hi < 1.0:
        return "slower", ci
    return "same within noise", ci


def basis_line(meta: dict[str, Any]) -> str:
    """The basis the SOL fractions stand on, in one line, saying "quick" when the calibration was quick."""
    cal = meta.get("calibration") or {}
    ceilings = meta.get("ceilings") or {}
    parts = []
    if "calibrated" in ceilings:
        kind = "QUICK calibration (small sizes, few reps: rough)" if cal.get("quick") else "full calibration"
        parts.append(f"calibrated = ceilings measured on this device, {kind}" +
                     (f", {cal['timestamp']}" if cal.get("timestamp") else ""))  # fmt: skip
    if "spec" in ceilings:
        parts.append("spec = datasheet dense peaks")
    else:
        parts.append("no spec basis (the device has no datasheet entry)")
    return "scored against: " + "; ".join(parts)


def device_label(meta: dict[str, Any]) -> str:
    """The device as a reader names it: the GPU's name and arch, or the CPU's model, cores and torch threads."""
    d = meta.get("device") or {}
    if d.get("kind") == "cpu" or (not meta.get("arch") and d.get("cpu_count")):
        model = meta.get("cpu_model") or d.get("name") or "CPU"
        bits = [f"{d['cpu_count']} cores" if d.get("cpu_count") else None,
                f"{meta['torch_threads']} torch threads" if meta.get("torch_threads") else None]  # fmt: skip
        extra = ", ".join(b for b in bits if b)
        return f"{model} (CPU{', ' + extra if extra else ''})"
    name = d.get("name") or "?"
    return f"{name} ({meta['arch']})" if meta.get("arch") else f"{name} (not in the hardware database)"
