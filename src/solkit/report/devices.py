"""Rows by the card they were timed on, and the card-to-card spread of the same row.

Two cards of one product differ (the 70B GEMM measured 4.96 ms on one H200 and 5.31 ms on another), so a
time is only compared with times from the same card (``device_uuid``); across cards a row is compared by its
SOL fraction against each card's own calibrated ceilings, and the spread says how far the cards apart are.
Rows from files written before rows carried a ``device_uuid`` count as one unnamed device per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def row_card(row: dict[str, Any], fallback: str = "") -> str:
    return row.get("device_uuid") or fallback


def devices_of(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cards of ``rows`` in order of first appearance: uuid, name and how many rows each has."""
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        card = row_card(r)
        if card not in seen:
            seen[card] = {"uuid": card or None, "name": r.get("device_name"), "rows": 0}
        seen[card]["rows"] += 1
    return list(seen.values())


def by_device(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``rows`` grouped by card (uuid), each group in the rows' own order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(row_card(r), []).append(r)
    return out


def same_card(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """May the times of two rows be compared? Only when both were timed on one card (or neither says which)."""
    ua, ub = a.get("device_uuid"), b.get("device_uuid")
    return ua == ub or not (ua and ub)


def _own_sol(row: dict[str, Any]) -> float | None:
    frac = row.get("sol_calibrated")
    return frac if frac is not None else row.get("sol_spec")


def card_spread(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows timed (status ok) on two or more cards, across every run given: per card its time and its SOL
    fraction against that card's own ceilings (calibrated, else spec); ``ms_spread`` = slowest / fastest - 1,
    ``sol_spread`` = highest - lowest fraction."""
    per_key: dict[tuple, dict[str, dict[str, Any]]] = {}
    for i, res in enumerate(runs):
        for r in res.get("rows", []):
            if r.get("status") != "ok" or not r.get("ms"):
                continue
            key = (r["problem"], r.get("size") or "", r.get("model") or "", r["backend"], r.get("workload") or "")
            per_key.setdefault(key, {})[row_card(r, f"run{i}")] = r
    out = []
    for key, cards in per_key.items():
        if len(cards) < 2:
            continue
        ms = {c: r["ms"] for c, r in cards.items()}
        sols = {c: _own_sol(r) for c, r in cards.items() if _own_sol(r) is not None}
        fastest, slowest = min(ms, key=ms.get), max(ms, key=ms.get)
        out.append({
            **dict(zip(("problem", "size", "model", "backend", "workload"), key)),
            "cards": {c: {"name": r.get("device_name"), "ms": r["ms"], "sol": _own_sol(r)} for c, r in cards.items()},
            "fastest": fastest, "slowest": slowest, "ms_spread": ms[slowest] / ms[fastest] - 1.0,
            "sol_spread": (max(sols.values()) - min(sols.values())) if len(sols) >= 2 else None,
        })  # fmt: skip
    return out


def short(uuid: str | None) -> str:
    """``GPU-3f2a9c1e`` for a GPU UUID, the CPU id as it is, ``-`` for none."""
    if not uuid:
        return "-"
    return uuid[:12] if uuid.startswith("GPU-") else uuid


def spread_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    cols = ["op", "size", "model", "backend", "cards", "fastest ms", "slowest ms", "ms spread", "SOL spread"]
    body = [[r["problem"], r["size"], r["model"], r["backend"], len(r["cards"]), r["cards"][r["fastest"]]["ms"],
             r["cards"][r["slowest"]]["ms"], f"{r['ms_spread']:.1%}",
             f"{r['sol_spread']:.3f}" if r["sol_spread"] is not None else "-"] for r in rows]  # fmt: skip
    return cols, body


def devices_markdown(results: dict[str, Any]) -> list[str]:
    """report.md's section for a run on several cards: the cards, and the spread of rows timed on more than one."""
    cards = devices_of(results["rows"])
    if len(cards) < 2:
        return []
    lines = ["", "## Devices", "", "Times are compared only within one card; across cards, by each card's own SOL.",
             "", "| device | name | rows |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {short(c['uuid'])} | {c['name'] or '-'} | {c['rows']} |" for c in cards]
    spread = card_spread([results])
    if spread:
        cols, body = spread_table(spread)
        lines += ["", "### Card-to-card spread of the same row", "", "| " + " | ".join(cols) + " |",
                  "|" + "---|" * len(cols)]  # fmt: skip
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return lines
