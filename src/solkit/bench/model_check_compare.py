"""The comparison of ``solkit model-check``: a model step's GEMM calls against their bench rows, per call and summed.

Per call and per timing (sustained: back to back; burst: idle gaps at the step's GEMM duty) the ratio is the
model's SOL fraction over the bench row's, within the tolerance or not. A compute-bound call's time scales as
1 / SM clock, so each ratio also has its value **at equal SM clocks** (times the bench row's clock over the
model's): where the step's kernels ran at another clock than the bench's, that says how much of the gap the clock
explains. The verdict stays on the ratio at face value (the burst one where timed); the per-clock ratios stand
beside it, labelled.

The timer is duck-typed (``bench(g, gap_ms)`` and ``layout(g, gap_ms)``, each a row with ``sol_raw``, ``t_sol_ms``
and ``clock``), so the comparison is tested without a GPU.
"""

from __future__ import annotations

from typing import Any

from solkit.errors import SolkitError

#: The agreement the model's per-GEMM SOL fractions are held to (issue 21's goal).
TOLERANCE = 0.05
#: T_SOL of the model's call and of the bench row may differ by rounding only; more means another basis.
T_SOL_AGREE = 0.01
#: Per-call keys of a model run's GEMM entry that a comparison row keeps.
ROW_KEYS = ("name", "op", "backward", "batch", "m", "k", "n", "layout", "a_transposed", "b_transposed", "a_stride",
            "b_stride", "bias_shape", "dtype", "category", "calls")  # fmt: skip
#: The summary's shares: (summary key, row's within key, row's ratio key).
SHARES = (("bench", "within", "ratio"), ("layout", "layout_within", "layout_ratio"),
          ("bench_per_clock", "within_per_clock", "ratio_per_clock"),
          ("layout_per_clock", "layout_within_per_clock", "layout_ratio_per_clock"),
          ("bench_burst", "within_burst", "ratio_burst"), ("layout_burst", "layout_within_burst", "layout_ratio_burst"),
          ("bench_burst_per_clock", "within_burst_per_clock", "ratio_burst_per_clock"),
          ("layout_burst_per_clock", "layout_within_burst_per_clock", "layout_ratio_burst_per_clock"))  # fmt: skip


def step_duty(d: dict[str, Any]) -> float | None:
    """The share of a model run's step (wall time) spent in its GEMM kernels: the duty cycle the burst timing
    reproduces; None when the run recorded no wall time or no GEMM."""
    wall = (d.get("summary") or {}).get("wall_ms") or 0.0
    gemm = sum(g.get("time_ms") or 0.0 for g in d.get("gemms") or [])
    if wall <= 0 or gemm <= 0:
        return None
    return min(gemm / wall, 1.0)


def burst_gap_ms(call_ms: float, duty: float) -> float:
    """GPU idle time before each call so that calls of ``call_ms`` take ``duty`` of the time (0 < duty <= 1)."""
    if not 0 < duty <= 1:
        raise SolkitError(f"--duty {duty}: must be above 0 and at most 1")
    if call_ms < 0:
        raise SolkitError(f"a GEMM time of {call_ms} ms: must be 0 or more")
    return call_ms * (1.0 - duty) / duty


def is_bench_layout(g: dict[str, Any]) -> bool:
    """The call is the bench's ``x @ w.T`` itself: an ``mm`` with the second operand column-major, nothing
    broadcast."""
    broadcast = 0 in (g.get("a_stride") or []) + (g.get("b_stride") or [])
    return g["op"] == "mm" and not g["a_transposed"] and g["b_transposed"] and not broadcast


def _ratio(model: float | None, other: dict[str, Any] | None, tol: float) -> tuple[float | None, bool | None]:
    if not model or not other or not other.get("sol_raw"):
        return None, None
    r = model / other["sol_raw"]
    return r, abs(r - 1.0) <= tol


def per_clock(ratio: float | None, model_mhz: float | None, other: dict[str, Any] | None,
              tol: float) -> tuple[float | None, bool | None]:  # fmt: skip
    """The ratio at equal clocks: a compute-bound kernel's time scales as 1 / SM clock, so the model's SOL over the
    bench's, times the bench's clock over the model's."""
    other_mhz = ((other or {}).get("clock") or {}).get("sm_clock_mhz")
    if ratio is None or not model_mhz or not other_mhz:
        return None, None
    r = ratio * other_mhz / model_mhz
    return r, abs(r - 1.0) <= tol


def _keys(label: str) -> tuple[str, ...]:
    """A timing's keys of a row (``label`` "" for sustained, "_burst" for burst), in ``_timed``'s order."""
    return ("bench_burst" if label else "bench", f"ratio{label}", f"within{label}",
            "layout_burst" if label else "layout_run", f"layout_ratio{label}", f"layout_within{label}",
            f"ratio{label}_per_clock", f"within{label}_per_clock", f"layout_ratio{label}_per_clock",
            f"layout_within{label}_per_clock")  # fmt: skip


def _timed(g: dict[str, Any], timer, tol: float, gap_ms: float, layout: bool, mhz: float | None,
           label: str) -> dict[str, Any]:  # fmt: skip
    """One timing's part of a row: the bench row and the layout row timed with ``gap_ms`` of idle before each
    call, their ratios at face value and at equal SM clocks."""
    b = timer.bench(g, gap_ms)
    lay = timer.layout(g, gap_ms) if layout else None
    (r_b, ok_b), (r_l, ok_l) = _ratio(g["sol_raw"], b, tol), _ratio(g["sol_raw"], lay, tol)
    (pc_b, pc_ok_b), (pc_l, pc_ok_l) = per_clock(r_b, mhz, b, tol), per_clock(r_l, mhz, lay, tol)
    return dict(zip(_keys(label), (b, r_b, ok_b, lay, r_l, ok_l, pc_b, pc_ok_b, pc_l, pc_ok_l), strict=True))


def compare(gemms: list[dict[str, Any]], timer, tolerance: float = TOLERANCE, layout: bool = True,
            timings: tuple[str, ...] = ("sustained",), duty: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Rows (one per distinct GEMM call of the model) and a summary: model SOL, bench SOL, ratio, within? in each of
    ``timings`` (``burst`` needs the step's GEMM ``duty``), each also at equal SM clocks."""
    if "burst" in timings and duty is None and gemms:
        raise SolkitError("the burst timing needs the step's GEMM duty: the run recorded no wall time (give --duty)")
    rows = []
    for g in gemms:
        # only a compute-bound call's time scales with the SM clock (a memory-bound one's with the memory clock)
        mhz = (g.get("clock") or {}).get("sm_clock_mhz") if g.get("bound", "compute") == "compute" else None
        if "sustained" in timings:
            sustained = _timed(g, timer, tolerance, 0.0, layout, mhz, "")
        else:
            sustained = dict.fromkeys(_keys(""))
        burst: dict[str, Any] = {}
        if "burst" in timings:
            gap = burst_gap_ms(g["time_ms_per_call"], duty)
            burst = {"burst_gap_ms": gap, **_timed(g, timer, tolerance, gap, layout, mhz, "_burst")}
        # the call's own work is the layout row's; the bench row's only where the call is x @ w.T itself
        same = sustained["layout_run"] or burst.get("layout_burst")
        if not same and is_bench_layout(g) and g["bias_shape"] is None:
            same = sustained["bench"] or burst.get("bench_burst")
        t_ref = (same or {}).get("t_sol_ms")
        rows.append({
            **{k: g[k] for k in ROW_KEYS},
            "bound": g.get("bound"),
            "model_ms_per_call": g["time_ms_per_call"],
            "model_t_sol_ms": g["t_sol_ms_per_call"],
            "model_sol": g["sol_raw"],
            **sustained,
            **burst,
            "model_clock": g.get("clock"),
            "t_sol_agrees": (abs(t_ref - g["t_sol_ms_per_call"]) <= T_SOL_AGREE * g["t_sol_ms_per_call"]
                             if t_ref and g["t_sol_ms_per_call"] else None),
        })  # fmt: skip
    summary = {**summarise(rows), "timings": list(timings), "duty": duty,
               "judged_on": "burst" if "burst" in timings else "sustained"}  # fmt: skip
    return {"tolerance": tolerance, "rows": rows, "summary": summary}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per share (``SHARES``): rows within, rows compared, all within, the worst row and its ratio; a per-clock
    share also counts the rows whose step clock is an estimate (``clock_estimated``: the nearest NVML sample, none
    having fallen inside the call's kernels)."""

    def share(key: str, within: str, ratio: str) -> dict[str, Any]:
        seen = [r for r in rows if r.get(within) is not None]
        worst = max(seen, key=lambda r: abs(r[ratio] - 1), default=None)
        out = {"within": sum(bool(r[within]) for r in seen), "compared": len(seen),
               "all_within": bool(seen) and all(r[within] for r in seen), "worst": worst["name"] if worst else None,
               "worst_ratio": worst[ratio] if worst else None}  # fmt: skip
        if key.endswith("per_clock"):
            out["clock_estimated"] = sum(bool((r.get("model_clock") or {}).get("nearest")) for r in seen)
        return out

    time_ms = sum(r["model_ms_per_call"] * r["calls"] for r in rows)
    return {"gemms": len(rows), "model_gemm_ms": time_ms, **{key: share(key, w, r) for key, w, r in SHARES},
            "t_sol_agrees": all(r["t_sol_agrees"] is not False for r in rows)}  # fmt: skip
