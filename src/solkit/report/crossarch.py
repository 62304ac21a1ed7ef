"""Bench results across architectures: what-if SOL on other products, and runs from several devices side by side.

* :func:`what_if_section`: every measured row's work (FLOPs by unit, fused bytes) on other products' datasheet
  ceilings through the one model (:mod:`solkit.sol.whatif`): T_SOL, bound and the tier the row would be in if it
  kept its measured fraction of SOL there. This is analysis, not a measurement: times do not transfer between
  products (the dispatched path, its configuration and occupancy all change).
* :func:`compare_devices`: results files from different devices, lined up per (problem, size, model, backend).
  A row timed on one card is compared with another card's only through each card's own SOL fraction (T_SOL of
  that card / its own measured time), never through a ratio of the two times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from solkit.errors import SolkitError

ANALYSIS_NOTE = (
    "analysis, not measurement: T_SOL and bound from each product's datasheet ceilings for the row's work; "
    "tier = where the row would stand there if it kept its measured fraction of SOL (spec basis); "
    "* = the bound changes between the products"
)


def product_ids(text: str | Sequence[str], flag: str = "--what-if") -> list[str]:
    """Product ids from ``ARCH[,ARCH]``; an unknown one is a one-line error naming the flag and the allowed ids."""
    from solkit.hardware.specs import arch_ids

    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    known = arch_ids()
    if not items:
        raise SolkitError(f"{flag}: give one or more product ids; allowed: {', '.join(known)}")
    bad = [t for t in items if t not in known]
    if bad:
        raise SolkitError(f"{flag}: unknown product id {', '.join(map(repr, bad))}; allowed: {', '.join(known)}")
    return list(dict.fromkeys(items))


def measured(row: dict[str, Any]) -> bool:
    """A row with a time and some work to put on another product."""
    return row.get("status") == "ok" and bool(row.get("ms")) and bool(row.get("flops") or row.get("fused_bytes"))


def row_key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (row["problem"], row.get("size") or "", row.get("model") or "", row["backend"])


def _fraction(row: dict[str, Any]) -> float | None:
    # The spec basis: the other products are on theirs, so the fraction carried over is the comparable one.
    frac = row.get("sol_spec")
    return min(float(frac), 1.0) if frac is not None else None


def what_if_section(results: dict[str, Any], products: Sequence[str]) -> dict[str, Any]:
    """``results["what_if"]``: per measured row, T_SOL (ms), bound and tier on each product; ``bound_changes``."""
    from solkit.sol.whatif import WorkRow, what_if_table

    rows = [r for r in results["rows"] if measured(r)]
    work = [
        WorkRow(str(i), {u: float(v) for u, v in (r.get("flops") or {}).items()}, float(r.get("fused_bytes") or 0),
                sol_fraction=_fraction(r), measured_on=results["meta"].get("arch"))
        for i, r in enumerate(rows)
    ]  # fmt: skip
    table = what_if_table(work, products) if work else {}
    out_rows = []
    for i, r in enumerate(rows):
        cells = table.get(str(i), {})
        per = {
            pid: {"t_sol_ms": w.t_sol_s * 1e3 if w.available else None, "bound": w.bound, "tier": w.tier,
                  "arithmetic_intensity": w.arithmetic_intensity, "ridge_point": w.ridge_point,
                  **({"reason": w.reason} if w.reason else {})}
            for pid, w in cells.items()
        }  # fmt: skip
        bounds = {c["bound"] for c in per.values() if c["bound"]}
        out_rows.append({
            "problem": r["problem"], "size": r.get("size"), "model": r.get("model"), "backend": r["backend"],
            "workload": r.get("workload"), "bound_here": r.get("bound"), "sol_spec_here": r.get("sol_spec"),
            "products": per, "bound_changes": len(bounds) > 1,
        })  # fmt: skip
    return {
        "products": list(products),
        "measured_on": results["meta"].get("arch"),
        "kind": "analysis",
        "note": ANALYSIS_NOTE,
        "rows": out_rows,
    }


def _time(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.3g} ms" if ms >= 1 else f"{ms * 1e3:.3g} µs"


def what_if_cell(c: dict[str, Any]) -> str:
    """``12.3 µs M 60-80 %``: T_SOL, C (compute) or M (memory), the tier if any; ``n/a (reason)``."""
    if c.get("t_sol_ms") is None:
        return f"n/a ({c.get('reason', '')})"
    return " ".join(x for x in (_time(c["t_sol_ms"]), (c["bound"] or "?")[0].upper(), c.get("tier") or "") if x)


def what_if_rows(section: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of the what-if table (a star on rows whose bound changes between the products)."""
    cols = ["op", "size", "model", "backend", "SOL here"] + [f"{p} (T_SOL bound tier)" for p in section["products"]]
    rows = []
    for r in section["rows"]:
        sol = r.get("sol_spec_here")
        rows.append([r["problem"] + (" *" if r["bound_changes"] else ""), r.get("size") or "", r.get("model") or "",
                     r["backend"], f"{sol:.2f}" if sol is not None else "-"]
                    + [what_if_cell(r["products"][p]) for p in section["products"] if p in r["products"]])  # fmt: skip
    return cols, rows


def what_if_markdown(section: dict[str, Any]) -> list[str]:
    """The report's what-if section (Markdown lines)."""
    cols, rows = what_if_rows(section)
    changed = sum(r["bound_changes"] for r in section["rows"])
    lines = ["", f"## What-if on {', '.join(section['products'])} (analysis)", "", f"{section['note']}.",
             f"{changed} of {len(rows)} measured rows change bound between these products.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]  # fmt: skip
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return lines


def device_label(results: dict[str, Any], fallback: str) -> str:
    m = results.get("meta") or {}
    return m.get("arch") or (m.get("device") or {}).get("name") or fallback


def device_labels(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One label per run: its product id (else device name); runs on one product get ``#index`` to stay apart."""
    labels = [device_label(r, f"run{i}") for i, r in enumerate(runs)]
    if len(set(labels)) != len(labels):
        labels = [f"{lab}#{i}" for i, lab in enumerate(labels)]
    return labels


def same_device(runs: Sequence[dict[str, Any]]) -> bool:
    """True when every run names the same device (product id, else device name) and, where rows name the card
    they were timed on, all of them were timed on one card (two cards of one product differ: their times are
    compared by SOL fraction, never directly)."""
    cards = {r.get("device_uuid") for res in runs for r in res.get("rows", []) if r.get("device_uuid")}
    return len({device_label(r, str(i)) for i, r in enumerate(runs)}) <= 1 and len(cards) <= 1


def compare_devices(runs: Sequence[dict[str, Any]], labels: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows of runs from several devices lined up per (problem, size, model, backend), each with its own SOL.

    ``devices`` holds per device the time, its own SOL fraction (spec and calibrated basis), bound and tier;
    ``sol_spread`` is the highest minus the lowest SOL fraction across the devices (the spec basis where every
    device has one, else the calibrated basis), with ``best``/``worst`` naming the devices. Rows found on only
    one device are left out.
    """
    labels = list(labels or device_labels(runs))
    one_product = len({device_label(r, str(i)) for i, r in enumerate(runs)}) == 1
    by_key: dict[tuple, dict[str, dict[str, Any]]] = {}
    for lab, res in zip(labels, runs):
        for r in res["rows"]:
            by_key.setdefault(row_key(r), {})[lab] = r
    out = []
    for key, per in by_key.items():
        if len(per) < 2:
            continue
        devices = {
            lab: {"status": r.get("status"), "ms": r.get("ms"), "sol_spec": r.get("sol_spec"),
                  "sol_calibrated": r.get("sol_calibrated"), "bound": r.get("bound"), "tier": r.get("tier")}
            for lab, r in per.items()
        }  # fmt: skip
        # One product on several cards: each card's own calibrated ceilings (the datasheet is the same for all).
        own = one_product and all(d["sol_calibrated"] is not None for d in devices.values())
        spec = all(d["sol_spec"] is not None for d in devices.values())
        basis = "sol_calibrated" if own or not spec else "sol_spec"
        fracs = {lab: d[basis] for lab, d in devices.items() if d[basis] is not None}
        row: dict[str, Any] = dict(zip(("problem", "size", "model", "backend"), key))
        row["devices"] = devices
        row["basis"] = basis.removeprefix("sol_")
        if len(fracs) >= 2:
            best, worst = max(fracs, key=fracs.get), min(fracs, key=fracs.get)
            row.update(sol_spread=fracs[best] - fracs[worst], best=best, worst=worst)
        else:
            row.update(sol_spread=None, best=None, worst=None)
        row["bound_changes"] = len({d["bound"] for d in devices.values() if d["bound"]}) > 1
        out.append(row)
    return out


def compare_devices_rows(rows: list[dict[str, Any]], labels: Sequence[str]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the device comparison: per device ms (its own) and SOL (its own); the spread."""
    cols = ["op", "size", "model", "backend"]
    for lab in labels:
        cols += [f"ms {lab}", f"SOL {lab}"]
    cols += ["SOL spread", "best", "bound"]
    body = []
    for r in rows:
        cells: list[Any] = [r["problem"], r["size"], r["model"], r["backend"]]
        for lab in labels:
            d = r["devices"].get(lab) or {}
            frac = d.get("sol_" + r["basis"])
            cells += [d.get("ms") if d.get("status") == "ok" else d.get("status"), frac]
        bounds = [(r["devices"].get(lab) or {}).get("bound") or "-" for lab in labels]
        cells += [r["sol_spread"], r["best"], " / ".join(bounds) + (" *" if r["bound_changes"] else "")]
        body.append(cells)
    return cols, body
