"""Operators ranked by time lost to SOL over several profiled steps, with ties, and when two rankings agree.

One profiled step gives each operator one time; the next step gives another. Operators whose time lost differs by
less than that step-to-step change cannot be ordered by one step. So ``solkit model`` profiles ``steps`` steps and
ranks each operator by its **median** time lost across them, with its measured **spread** (min to max over the
steps). Two operators are **tied** when their spreads overlap; in a ranked list, runs of overlapping neighbours form
one tie group (``2=``).

Two top-k lists (of two runs of the same step) are **stable** (:func:`top_stability`) when they are equal up to
ties measured within each run:

* every operator in one top-k and not in the other is *tied at the cut* in both runs: in the run whose top-k holds
  it, its spread overlaps the spread of an operator outside that top-k, and in the other run its spread overlaps
  the spread of an operator inside that top-k (an operator the other run did not measure is not tied);
* every pair of operators in both top-k lists that the runs order differently is tied in both runs.

Only each run's own step-to-step spread counts: the change between the runs is what is tested, never used as the
tolerance.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Profiled steps by default: the fewest that give a median and a spread.
STEPS = 3
#: Length of the lists compared for stability (issue 21's top-5).
TOP_K = 5


@dataclass(frozen=True)
class Spread:
    """An operator's time lost (ms) over the profiled steps: median, min and max."""

    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no steps")
        return cls(statistics.median(values), min(values), max(values))

    def overlaps(self, other: Spread) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


def rank(items: list[tuple[str, Spread]]) -> list[dict[str, Any]]:
    """``items`` ranked by median time lost (then by name, for a fixed order), each with its place (1-based), its tie
    group (neighbours whose spreads overlap, chained) and a label (``3`` or ``3=`` for a member of a tie group of two
    or more, numbered by the group's first place)."""
    ordered = sorted(items, key=lambda it: (-it[1].median, it[0]))
    out: list[dict[str, Any]] = []
    group, first = 0, 1
    for i, (name, sp) in enumerate(ordered):
        if i and not sp.overlaps(ordered[i - 1][1]):
            group, first = group + 1, i + 1
        out.append({"name": name, "place": i + 1, "tie_group": group, "first": first, **_ms(sp)})
    sizes: dict[int, int] = {}
    for r in out:
        sizes[r["tie_group"]] = sizes.get(r["tie_group"], 0) + 1
    for r in out:
        r["rank_label"] = f"{r.pop('first')}{'=' if sizes[r['tie_group']] > 1 else ''}"
    return out


def _ms(sp: Spread) -> dict[str, float]:
    return {"lost_ms_median": sp.median, "lost_ms_min": sp.lo, "lost_ms_max": sp.hi}


def _spreads(ranking: list[dict[str, Any]]) -> dict[str, Spread]:
    return {r["name"]: Spread(r["lost_ms_median"], r["lost_ms_min"], r["lost_ms_max"]) for r in ranking}


def cut_ties(ranking: list[dict[str, Any]], k: int = TOP_K) -> set[str]:
    """Operators of a ranking whose membership of its top-``k`` the measured spread cannot decide: those inside whose
    spread overlaps an operator's outside, and those outside whose spread overlaps an operator's inside."""
    sp = _spreads(ranking)
    names = [r["name"] for r in sorted(ranking, key=lambda r: r["place"])]
    inside, outside = names[:k], names[k:]
    return {a for a in inside if any(sp[a].overlaps(sp[b]) for b in outside)} | {
        b for b in outside if any(sp[b].overlaps(sp[a]) for a in inside)
    }


def top_stability(a: list[dict[str, Any]], b: list[dict[str, Any]], k: int = TOP_K) -> dict[str, Any]:
    """Whether two rankings (``summary.ranking`` of two results.json) have the same top-``k`` up to measured ties
    (see the module's docstring), and why not."""
    top_a = [r["name"] for r in sorted(a, key=lambda r: r["place"])][:k]
    top_b = [r["name"] for r in sorted(b, key=lambda r: r["place"])][:k]
    ties_a, ties_b = cut_ties(a, k), cut_ties(b, k)
    sp_a, sp_b = _spreads(a), _spreads(b)
    swapped = [n for n in top_a if n not in top_b] + [n for n in top_b if n not in top_a]
    untied = [n for n in swapped if not (n in ties_a and n in ties_b)]
    common = [n for n in top_a if n in top_b]
    reordered, untied_pairs = [], []
    for i, x in enumerate(common):
        for y in common[i + 1 :]:
            if top_b.index(x) > top_b.index(y):
                reordered.append([x, y])
                if not (sp_a[x].overlaps(sp_a[y]) and sp_b[x].overlaps(sp_b[y])):
                    untied_pairs.append([x, y])
    return {
        "k": k,
        "top_a": top_a,
        "top_b": top_b,
        "same_order": top_a == top_b,
        "same_set": set(top_a) == set(top_b),
        "swapped": swapped,
        "swapped_not_tied": untied,
        "reordered": reordered,
        "reordered_not_tied": untied_pairs,
        "stable": not untied and not untied_pairs,
        "rule": "equal up to operators tied at the cut in both runs (their step-to-step ranges of time lost overlap "
        "one across the cut) and pairs tied in both runs",
    }
