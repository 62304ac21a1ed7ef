"""SOL across architectures: the same work (FLOPs by math unit, fused bytes) on other products' datasheet ceilings.

For each row and product this gives T_SOL and the bound (compute or memory) on that product's spec basis,
through the one model (:func:`solkit.sol.model.t_sol` on :func:`solkit.sol.ceilings.spec_ceilings`), and
:func:`bound_changes` lists the rows whose bound differs between products: the cross-architecture picture
(a GEMM of arithmetic intensity 200 FLOP/B is compute-bound on an A100, ridge ~153, and memory-bound on a
B200, ridge ~293).

Measured times do not transfer between products: occupancy, shared memory, the path a dispatcher takes and
its tuned configuration all change. When a row carries a measured SOL fraction, ``tier`` is the tier that
fraction would fall in on the other product *if the kernel kept the same fraction of SOL there*: an
assumption to read as "where it would stand", never a prediction of its time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from solkit.errors import SolkitError
from solkit.sol.ceilings import spec_ceilings
from solkit.sol.model import Ceilings, t_sol
from solkit.sol.tiers import tier_for


@dataclass(frozen=True)
class WorkRow:
    """One row's work: FLOPs by math unit and fused bytes; ``sol_fraction`` if measured on some device."""

    name: str
    flops: Mapping[str, float]
    bytes: float
    sol_fraction: float | None = None
    measured_on: str | None = None


@dataclass(frozen=True)
class WhatIf:
    """One row on one product: T_SOL and bound, or why the product cannot run this work (a missing unit)."""

    row: str
    product: str
    t_sol_s: float | None
    bound: str | None  # "compute" | "memory" | None when unavailable
    arithmetic_intensity: float = 0.0
    ridge_point: float = 0.0
    tier: str | None = None  # only with a measured fraction: see the module docstring
    reason: str = ""
    per_unit_s: dict[str, float] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.t_sol_s is not None


def what_if(row: WorkRow, products: Iterable[str], ceilings: Mapping[str, Ceilings] | None = None) -> list[WhatIf]:
    """T_SOL and bound of ``row`` on each product's datasheet ceilings (``ceilings`` to reuse loaded ones)."""
    out = []
    for product in products:
        c = ceilings[product] if ceilings and product in ceilings else spec_ceilings(product)
        missing = [u for u, n in row.flops.items() if n and not c.flops.get(u)]
        if missing:
            out.append(WhatIf(row.name, c.arch, None, None, reason=f"no {', '.join(missing)} on {c.arch}"))
            continue
        r = t_sol(row.flops, row.bytes, c)
        tier = tier_for(row.sol_fraction, r.bound).name if row.sol_fraction is not None else None
        out.append(
            WhatIf(row.name, c.arch, r.t_sol_s, r.bound, r.arithmetic_intensity, r.ridge_point, tier,
                   per_unit_s=dict(r.per_unit_s))
        )  # fmt: skip
    return out


def what_if_table(rows: Sequence[WorkRow], products: Sequence[str]) -> dict[str, dict[str, WhatIf]]:
    """``{row name: {product id: WhatIf}}`` for every row and product (ceilings loaded once per product)."""
    if len({r.name for r in rows}) != len(rows):
        raise SolkitError("what-if rows need distinct names")
    ceilings = {p: spec_ceilings(p) for p in products}
    ids = [ceilings[p].arch for p in products]
    return {r.name: dict(zip(ids, what_if(r, products, ceilings))) for r in rows}


def bound_changes(rows: Sequence[WorkRow], products: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """The rows whose bound differs between ``products`` (unavailable products ignored): ``(row, {id: bound})``."""
    out = []
    for name, cells in what_if_table(rows, products).items():
        bounds = {p: w.bound for p, w in cells.items() if w.bound is not None}
        if len(set(bounds.values())) > 1:
            out.append((name, bounds))
    return out


def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def markdown_table(rows: Sequence[WorkRow], products: Sequence[str]) -> str:
    """A Markdown table: one line per row, one column per product with T_SOL and C (compute) or M (memory),
    a star on rows whose bound changes between the products."""
    table = what_if_table(rows, products)
    ids = list(next(iter(table.values())).keys()) if table else list(products)
    changed = {name for name, _ in bound_changes(rows, products)}
    lines = ["| row | " + " | ".join(ids) + " |", "|---|" + "---|" * len(ids)]
    for name, cells in table.items():
        cols = [
            f"{_time(w.t_sol_s)} {w.bound[0].upper()}" if w.available else f"n/a ({w.reason})" for w in cells.values()
        ]
        lines.append(f"| {name}{' *' if name in changed else ''} | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"
