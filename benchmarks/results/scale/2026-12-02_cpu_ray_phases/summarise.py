"""Phases of each run of measure.sh: wall, before the bench's clock, first item back, items' own seconds, the
span of the items not covered by their own seconds (round trips, idle), after the last item (report, exit)."""
import json, sys, statistics
from pathlib import Path
out = Path(sys.argv[1]); runs = []
for w in sorted(out.glob("*.wall")):
    name = w.stem; s, e, load = w.read_text().split()
    s, e = float(s), float(e)
    res = json.loads((out / name / "results.json").read_text())
    t = res["meta"]["scale"]["timeline"]; items = t["items"]; before = t["started_at"] - s
    run = {"run": name, "variant": name.rsplit("_", 1)[0].replace("_beforeblock", "").replace("_afterblock", "").replace("ray_after", "ray"), "load_1min": float(load), "wall_s": round(e - s, 2),
           "before_clock_s": round(before, 2), "first_item_back_s": items[0]["done_s"],
           "first_item_seconds": items[0]["seconds"], "last_item_back_s": items[-1]["done_s"],
           "items_seconds_sum": round(sum(i["seconds"] for i in items), 2),
           "items_span_not_in_items_s": round(items[-1]["done_s"] - items[0]["done_s"] - sum(i["seconds"] for i in items[1:]), 3),
           "after_last_item_s": round(e - s - before - items[-1]["done_s"], 2), "items": len(items),
           "torch_threads": res["meta"].get("torch_threads"), "rows": len(res["rows"]),
           "statuses": [r["status"] for r in res["rows"]]}
    pool = res["meta"]["scale"].get("pool")
    if pool:
        rel = lambda x: round(x - s, 3)  # noqa: E731
        run["pool_s_from_start"] = {"connect": rel(pool["connect"]), "connected": rel(pool["connected"]),
            "actors_asked": rel(pool["actors_asked"]), "first_item_asked": rel(pool["first_item_asked"]),
            **{f"{k}_{f}": rel(v[f]) for k, v in pool["actors"].items() for f in ("born", "ready", "hello_read")}}
        run["idle_between_items"] = pool["idle_between_items"]
    runs.append(run)
keys = ["wall_s", "before_clock_s", "first_item_back_s", "items_seconds_sum", "items_span_not_in_items_s", "after_last_item_s"]
med = {}
for v in sorted({r["variant"] for r in runs}):
    rs = [r for r in runs if r["variant"] == v]
    med[v] = {k: round(statistics.median(r[k] for r in rs), 3) for k in keys} | {"n": len(rs)}
ref = runs[0]["statuses"]
print(json.dumps({"median_by_variant": med, "same_statuses_as_first_serial": {r["run"]: r["statuses"] == ref for r in runs}}, indent=1))
(out / "phases.json").write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "statuses"} for r in runs],
    "median_by_variant": med, "same_statuses_as_first_serial": {r["run"]: r["statuses"] == ref for r in runs}}, indent=1))
