"""A measured step on other products: every operator's T_SOL, bound and tier on their datasheets.

Each call with a known work (FLOPs by math unit, bytes at its boundary) goes through the same model the
bench uses (:mod:`solkit.sol.whatif`: T_SOL on each product's spec ceilings); an operator's T_SOL on a
product is the sum over its calls, its bound is compute when any call is, and its tier is where it
would stand there if it kept the SOL fraction measured here. The step gets Σ T_SOL per product. This is
analysis, not measurement: times do not transfer between products.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from solkit.model.report import Group, ModelReport
from solkit.sol.tiers import tier_for
from solkit.sol.whatif import WhatIf, WorkRow, what_if_table

NOTE = (
    "analysis, not measurement: T_SOL and bound from each product's datasheet ceilings for the operator's work "
    "(summed over its calls); tier = where it would stand there if it kept the SOL fraction measured here; "
    "* = the bound changes between the products"
)


def _cell(g: Group, cells: list[WhatIf]) -> dict[str, Any]:
    """One operator on one product, from its calls' cells."""
    missing = [w.reason for w in cells if not w.available]
    if missing or not cells:
        return {"t_sol_ms": None, "bound": None, "tier": None, "reason": missing[0] if missing else "no work known"}
    bound = "compute" if any(w.bound == "compute" for w in cells) else "memory"
    frac = g.sol_fraction
    return {
        "t_sol_ms": sum(w.t_sol_s for w in cells) * 1e3,
        "bound": bound,
        "tier": tier_for(frac, bound).label if frac is not None else None,
    }


def add_what_if(rep: ModelReport, products: Sequence[str]) -> dict[str, Any]:
    """Set ``rep.what_if`` (the step per product) and each operator's ``what_if`` cells; returns the section.

    ``products``: product ids of ``solkit hw list`` (checked by :func:`solkit.report.crossarch.product_ids`).
    """
    work = [
        WorkRow(str(i), r.flops, r.bytes, measured_on=rep.meta.get("arch"))
        for i, r in enumerate(rep.rows)
        if r.match and (r.flops or r.bytes)
    ]
    table = what_if_table(work, products) if work else {}
    ids = list(next(iter(table.values())).keys()) if table else list(products)
    step = {p: {"t_sol_ms": 0.0, "unavailable_calls": 0} for p in ids}
    for cells in table.values():
        for p, w in cells.items():
            if w.available:
                step[p]["t_sol_ms"] += w.t_sol_s * 1e3
            else:
                step[p]["unavailable_calls"] += 1
    changed = []
    for g in rep.ops:
        rows = [table[str(i)] for i in g.members if str(i) in table]
        if not rows:
            continue
        g.what_if = {p: _cell(g, [r[p] for r in rows]) for p in ids}
        if len({c["bound"] for c in g.what_if.values() if c["bound"]}) > 1:
            changed.append(g.name)
    for s in step.values():  # Σ T_SOL there over Σ T_SOL here (the same calls; unavailable ones left out)
        s["vs_here"] = s["t_sol_ms"] / (rep.t_sol_s * 1e3) if rep.t_sol_s else None
    rep.what_if = {
        "products": ids,
        "measured_on": rep.meta.get("arch"),
        "precision": rep.meta.get("precision"),  # the basis of the work: the same on every product
        "kind": "analysis",
        "note": NOTE,
        "here_t_sol_ms": rep.t_sol_s * 1e3,
        "step": step,
        "bound_changes": changed,
    }
    return rep.what_if
