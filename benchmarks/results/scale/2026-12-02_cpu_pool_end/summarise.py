"""Phases of each run of measure.sh (OUTDIR/MODE_ROUND/ and MODE_ROUND.wall): wall, before the bench's clock, the
first item back and its own seconds, the items' own seconds (all, and after the first), the items' span not in their
own seconds, after the last item; then the medians per mode.

    python3 summarise.py OUTDIR
"""

import json
import statistics
import sys
from pathlib import Path


def phases(run: Path) -> dict[str, float]:
    start, end = map(float, run.with_suffix(".wall").read_text().split())
    t = json.loads((run / "results.json").read_text())["meta"]["scale"]["timeline"]
    items, before = t["items"], t["started_at"] - start
    rest = sum(i["seconds"] for i in items[1:])
    return {
        "wall": end - start, "before": before, "first_back": items[0]["done_s"], "first": items[0]["seconds"],
        "items": sum(i["seconds"] for i in items), "rest": rest,
        "span_gap": items[-1]["done_s"] - items[0]["done_s"] - rest,
        "after": end - start - before - items[-1]["done_s"],
    }  # fmt: skip


def main() -> None:
    by_mode: dict[str, list[dict[str, float]]] = {}
    for run in sorted(p for p in Path(sys.argv[1]).glob("*_[0-9]*") if p.is_dir()):
        try:
            r = phases(run)
        except (OSError, ValueError, KeyError) as exc:
            print(run.name, "no results", exc)
            continue
        by_mode.setdefault(run.name.rsplit("_", 1)[0], []).append(r)
        print(run.name, " ".join(f"{k} {v:.2f}" for k, v in r.items()))
    for mode, rs in by_mode.items():
        print("MEDIAN", mode, " ".join(f"{k} {statistics.median(r[k] for r in rs):.2f}" for k in rs[0]))


if __name__ == "__main__":
    main()
