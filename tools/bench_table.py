#!/usr/bin/env python3
"""Render a `solkit bench` results.json as the markdown table of docs/bench.md: one row per problem and model,
one cell per backend (median time and SOL fraction on the calibrated basis), and the best backend.

    python tools/bench_table.py benchmarks/results/bench/2026-11-30_h200_size_l/results.json
    python tools/bench_table.py OLD.json --diff NEW.json     # solkit rows that moved by more than 2 %
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BACKENDS = ("eager", "compile", "vendor", "liger", "solkit")
MODELS = {"llama3-8b": "8b", "llama3-70b": "70b"}


def _time(ms: float) -> str:
    return f"{ms * 1000:.0f} µs" if ms < 1 else f"{ms:.2f} ms"


def _cell(row: dict | None) -> str:
    if row is None or row["status"] == "unavailable":
        return "–"
    if row["status"] != "ok":
        return row["status"]  # incorrect / error: the verdict, never a time
    viol = " (viol.)" if row.get("sol_violation") else ""
    return f"{_time(row['ms'])}, {min(row['sol_calibrated'], 1.0):.2f}{viol}"


def load(path: str) -> dict[tuple[str, str], dict[str, dict]]:
    """(problem, model) -> backend -> row."""
    table: dict[tuple[str, str], dict[str, dict]] = {}
    for row in json.loads(Path(path).read_text())["rows"]:
        key = (row["problem"], MODELS.get(row["model"], row["model"]))
        table.setdefault(key, {})[row["backend"]] = row
    return table


def best(cells: dict[str, dict]) -> str:
    ok = [r for r in cells.values() if r["status"] == "ok"]
    if not ok:
        return "–"
    # highest SOL (capped at 1, as scored); equal rounded SOL is broken by time
    top = max(ok, key=lambda r: (round(min(r["sol_calibrated"], 1.0), 2), -r["ms"]))
    return f"{top['backend']} {min(top['sol_calibrated'], 1.0):.2f}"


def render(path: str) -> str:
    lines = ["| problem | model | " + " | ".join(BACKENDS) + " | best |", "|---" * (len(BACKENDS) + 3) + "|"]
    order = list(MODELS.values())
    rows = sorted(load(path).items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]) if kv[0][1] in order else 99))
    for (problem, model), cells in rows:
        lines.append(f"| {problem} | {model} | " + " | ".join(_cell(cells.get(b)) for b in BACKENDS)
                     + f" | {best(cells)} |")  # fmt: skip
    return "\n".join(lines)


def diff(old: str, new: str, threshold: float = 0.02) -> str:
    a, b = load(old), load(new)
    out = []
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key].get("solkit"), b[key].get("solkit")
        if ra and rb and ra["status"] == rb["status"] == "ok" and abs(rb["ms"] / ra["ms"] - 1) > threshold:
            out.append(f"{key[0]} {key[1]}: {_time(ra['ms'])} -> {_time(rb['ms'])} "
                       f"({ra['sol_calibrated']:.2f} -> {rb['sol_calibrated']:.2f})")  # fmt: skip
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--diff", metavar="NEW", help="list solkit rows that moved by more than 2 %% from RESULTS to NEW")
    args = p.parse_args()
    print(diff(args.results, args.diff) if args.diff else render(args.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
