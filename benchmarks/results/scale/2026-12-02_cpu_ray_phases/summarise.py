"""Phases of each run of measure.sh: wall, before the bench's clock, first item back, items' own seconds, the
span of the items not covered by their own seconds (round trips, idle), after the last item (report, exit).

    python3 summarise.py OUTDIR   # prints the medians per variant, writes OUTDIR/phases.json
"""

import json
import statistics
import sys
from pathlib import Path

KEYS = ["wall_s", "before_clock_s", "first_item_back_s", "items_seconds_sum", "items_span_not_in_items_s",
        "after_last_item_s"]  # fmt: skip


def variant(name: str) -> str:
    base = name.rsplit("_", 1)[0]
    return base.replace("_beforeblock", "").replace("_afterblock", "").replace("ray_after", "ray")


def pool_phases(pool: dict, start: float) -> dict:
    """The Ray pool's recorded moments, in seconds from the process's start."""
    out = {k: round(pool[k] - start, 3) for k in ("connect", "connected", "actors_asked", "first_item_asked")}
    for actor, marks in pool["actors"].items():
        out.update({f"{actor}_{m}": round(marks[m] - start, 3) for m in ("born", "ready", "hello_read")})
    return out


def one_run(out: Path, wall: Path) -> dict:
    name = wall.stem
    start, end, load = wall.read_text().split()
    start, end = float(start), float(end)
    res = json.loads((out / name / "results.json").read_text())
    t = res["meta"]["scale"]["timeline"]
    items, before = t["items"], t["started_at"] - start
    own_after_first = sum(i["seconds"] for i in items[1:])
    run = {
        "run": name, "variant": variant(name), "load_1min": float(load), "wall_s": round(end - start, 2),
        "before_clock_s": round(before, 2), "first_item_back_s": items[0]["done_s"],
        "first_item_seconds": items[0]["seconds"], "last_item_back_s": items[-1]["done_s"],
        "items_seconds_sum": round(sum(i["seconds"] for i in items), 2),
        "items_span_not_in_items_s": round(items[-1]["done_s"] - items[0]["done_s"] - own_after_first, 3),
        "after_last_item_s": round(end - start - before - items[-1]["done_s"], 2), "items": len(items),
        "torch_threads": res["meta"].get("torch_threads"), "rows": len(res["rows"]),
        "statuses": [r["status"] for r in res["rows"]],
    }  # fmt: skip
    pool = res["meta"]["scale"].get("pool")
    if pool:
        run["pool_s_from_start"] = pool_phases(pool, start)
        run["idle_between_items"] = pool["idle_between_items"]
    return run


def main() -> None:
    out = Path(sys.argv[1])
    runs = [one_run(out, w) for w in sorted(out.glob("*.wall"))]
    med = {}
    for v in sorted({r["variant"] for r in runs}):
        rs = [r for r in runs if r["variant"] == v]
        med[v] = {k: round(statistics.median(r[k] for r in rs), 3) for k in KEYS} | {"n": len(rs)}
    same = {r["run"]: r["statuses"] == runs[0]["statuses"] for r in runs}
    print(json.dumps({"median_by_variant": med, "same_statuses_as_first_serial": same}, indent=1))
    kept = [{k: v for k, v in r.items() if k != "statuses"} for r in runs]
    doc = {"runs": kept, "median_by_variant": med, "same_statuses_as_first_serial": same}
    (out / "phases.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
