#!/usr/bin/env bash
# budget: 130
# The Ray path against the local paths on one H200 (issue 25: "the Ray path runs `solkit bench --size m` with the
# same results as the local path, at <= 5 % extra wall time"). Needs .whl_ray (ray 2.60, slimmed by
# tools/slim_wheel.py --preset ray) carried; matplotlib need not be (the reports then have no figures, in every
# run alike). A one-node Ray cluster is started first (`ray start --head`, one GPU, loopback, no dashboard, no
# usage stats, no auth token) and warmed with one task, as a user's running cluster would be; then `solkit bench
# --size m --backends eager,vendor --calibration quick` with `--ray auto` (one actor, num_gpus=1), serially (in
# this process) and with `--devices 0` (the local pool), in that order: warm file caches favour the later, local
# runs. The cluster offers every core of the host (`--num-cpus=$(nproc)`): the actor asks for its GPU's share of the
# node's cores and runs torch with that many threads, as the local worker and the serial run use the host's cores. SCALE_RAY_PLAN replaces the plan. The quick calibration is measured once
# beforehand and cached per GPU UUID, so no run measures it. Compares each pooled run's rows, statuses, order,
# errors and per-row times with the serial run's, and the wall times; writes $OUT/scale_ray.json (device, date,
# versions, commit, commands, walls, overheads, row comparisons, errors) even when Ray does not start. Every cap
# stays inside the budget (SCALE_RAY_SECONDS, else run_round's BUDGET, else 130); a run cut by its cap is compared on
# its checkpoint. The calibration runs beside the cluster's start, and the serial run starts once the cluster's
# processes are gone (`ray stop` then only polls). The
# summary prints the three walls and the ratios Ray / serial and Ray / local pool (the issue's goal: <= 1.05 against
# the local path), and each run's phases (before the bench's clock, first item, items, after the last item; for Ray
# also when it connected, asked for the actor, the actor was born and ready, and its idle time between items).
#   bash benchmarks/gpu_jobs/run_round.sh scale_ray
set -u
OUT=${OUT:?OUT must be set}
export SOLKIT_CACHE_DIR=${SOLKIT_CACHE_DIR:-/tmp/solkit_cache_scale}
# No network, no dashboard, no telemetry: a one-host cluster on the loopback.
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled RAY_DISABLE_DOCKER_CPU_WARNING=1
read -r -a PLAN <<<"${SCALE_RAY_PLAN:---size m --backends eager,vendor --calibration quick}"
PLAN+=(--json)
RAY_GPUS=${SCALE_RAY_GPUS:-1}
RAYCLI=(python3 -c 'import sys; from ray.scripts.scripts import main; sys.argv[0] = "ray"; sys.exit(main())')
now() { date +%s.%N; }
# The budget: SCALE_RAY_SECONDS, else the cap run_round.sh gives (BUDGET), else 130.
END=$(( $(date +%s) + ${SCALE_RAY_SECONDS:-${BUDGET:-130}} - 6 ))  # the budget less the summary's time
cap() {  # cap SECONDS RESERVE: SECONDS, or less when only that much is left before END after RESERVE more seconds
  local left=$(( END - $(date +%s) - $2 ))
  if [ "$left" -lt "$1" ]; then echo $(( left > 5 ? left : 5 )); else echo "$1"; fi
}
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

# The calibration (on the GPU), ray's version and the cluster's start and warm-up (on the CPU) are independent: side
# by side.
( python3 -c "import ray; print('ray', ray.__version__, ray.__file__)" 2>&1 | tail -1 >"$OUT/ray_version.txt"
  t=$(now)
  timeout 20 python3 -m solkit.cli calibrate --quick --json >"$OUT/calibration.json" 2>"$OUT/calibrate_log.txt"
  echo "calibrate rc=$? $(since "$t")s" >"$OUT/calibrate.rc" ) &
CAL=$!

t=$(now)
timeout 30 "${RAYCLI[@]}" start --head --node-ip-address=127.0.0.1 --port=6399 --num-gpus="$RAY_GPUS" --num-cpus="$(nproc)" \
  --object-store-memory=2000000000 --include-dashboard=false --disable-usage-stats >"$OUT/ray_start.txt" 2>&1
echo "ray start rc=$? $(since "$t")s" | tee -a "$OUT/runs.txt" "$OUT/ray_start.rc"
tail -n 3 "$OUT/ray_start.txt"
# A cluster in use is warm: its first connection (which waits for the head's own start-up) is made here, with one
# task, not in the timed run.
t=$(now)
timeout 15 python3 - >"$OUT/ray_warm.txt" 2>&1 <<'PY'
import ray

ray.init(address="auto", log_to_driver=False)
print(ray.get(ray.remote(lambda: "ok").remote()), ray.cluster_resources())
PY
echo "ray warm-up rc=$? $(since "$t")s: $(tail -n 1 "$OUT/ray_warm.txt")" | tee -a "$OUT/runs.txt"
wait "$CAL"
cat "$OUT/ray_version.txt" "$OUT/calibrate.rc"

run() {  # run NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  local start; start=$(now)
  echo "$start" >"$OUT/$name.start"
  timeout --kill-after=5 "$secs" python3 -m solkit.cli bench "${PLAN[@]}" --out "$OUT/$name" "$@" \
    >"$OUT/$name.stdout.json" 2>"$OUT/$name.stderr.txt"
  local rc=$?
  since "$start" >"$OUT/$name.wall"
  echo "$name rc=$rc wall=$(cat "$OUT/$name.wall")s" | tee -a "$OUT/runs.txt"
  tail -n 3 "$OUT/$name.stderr.txt"
}
run ray "$(cap 50 65)" --ray auto
# Ray's own logs, for a run that failed inside Ray (small: the job's session only); then the cluster stops, so
# that its idle processes do not run beside the local runs. `ray stop` kills them at once and then polls for
# seconds: the serial run starts once the cluster's processes are gone, while the command still polls.
tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray session_latest/logs 2>/dev/null || true
t=$(now)
( timeout 8 "${RAYCLI[@]}" stop --force >"$OUT/ray_stop.txt" 2>&1; echo "ray stop rc=$? $(since "$t")s" >"$OUT/ray_stop.rc" ) &
STOP=$!
for _ in $(seq 1 40); do
  sleep 0.2
  pgrep -f 'ray/core/src/ray/(raylet|gcs)' >/dev/null || break
done
echo "ray cluster's processes gone after $(since "$t")s"
run serial "$(cap 35 35)"
wait "$STOP"
cat "$OUT/ray_stop.rc" 2>/dev/null
if [ $(( END - $(date +%s) )) -ge 20 ]; then
  run devices0 "$(cap 50 0)" --devices 0
else
  echo "devices0 skipped: $(( END - $(date +%s) )) s left" | tee -a "$OUT/runs.txt"
fi

python3 - "$OUT" "${PLAN[*]}" <<'PY'
import datetime as dt, json, statistics, subprocess, sys
from pathlib import Path

out, plan = Path(sys.argv[1]), sys.argv[2]
RUNS = {"ray": "--ray auto", "serial": "", "devices0": "--devices 0"}


def load(name):
    d = out / name
    try:
        if (d / "results.json").exists():
            res = json.loads((d / "results.json").read_text())
            return res["rows"], res["meta"], True
        if (d / "results.partial.json").exists():
            return json.loads((d / "results.partial.json").read_text()), {}, False
    except (OSError, ValueError, KeyError):
        pass
    return [], {}, False


def last_error(name):
    try:
        lines = [x for x in (out / f"{name}.stderr.txt").read_text().splitlines() if "error" in x.lower()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


key = lambda r: (r["problem"], r["workload"], r["backend"])  # noqa: E731


def timeline(name, meta):
    """Where the run's wall time went: before the bench's clock started (imports; Ray's connection), the workloads'
    own seconds (in their worker) against the span in which they came back, and what followed (report, exit)."""
    t = (meta.get("scale") or {}).get("timeline")
    try:
        start, wall = float((out / f"{name}.start").read_text()), float((out / f"{name}.wall").read_text())
    except (OSError, ValueError):
        return None
    if not t or not t.get("items"):
        return None
    items = t["items"]
    before = t["started_at"] - start
    return {"before_clock_s": round(before, 2), "first_item_back_s": items[0]["done_s"],
            "first_item_seconds": items[0]["seconds"], "last_item_back_s": items[-1]["done_s"],
            "items_seconds_sum": round(sum(i["seconds"] for i in items), 2),
            "after_last_item_s": round(wall - before - items[-1]["done_s"], 2), **pool_phases(meta, start)}


def pool_phases(meta, start):
    """A Ray run's own steps (meta.scale.pool), in seconds from the process's start; the actor's idle time between
    items (the gap between one item's end and the next one's start, in the actor)."""
    p = (meta.get("scale") or {}).get("pool")
    if not p:
        return {}
    rel = {k: round(p[k] - start, 2) for k in ("connect", "connected", "actors_asked", "first_item_asked") if k in p}
    for name, a in (p.get("actors") or {}).items():
        rel.update({f"{name}_{k}": round(v - start, 2) for k, v in a.items()})
    return {"pool_s_from_start": rel, "idle_between_items": p.get("idle_between_items")}
runs = {n: load(n) for n in RUNS}
walls = {n: float((out / f"{n}.wall").read_text()) for n in RUNS if (out / f"{n}.wall").exists()}
base_rows, base_meta, base_done = runs["serial"]
base = {key(r): r for r in base_rows}


def compare(name, ref_name="serial"):
    rows, meta, done = runs[name]
    ref_rows, _, ref_done = runs[ref_name]
    a, b = {key(r): r for r in ref_rows}, {key(r): r for r in rows}
    both = [k for k in a if k in b]
    ratios = {k: b[k]["ms"] / a[k]["ms"] for k in both if a[k].get("ms") and b[k].get("ms")}
    wall = walls.get(name), walls.get(ref_name)
    return {
        "complete": done, "rows": len(b), "rows_in_both": len(both),
        "same_rows_in_order": [key(r) for r in rows] == [key(r) for r in ref_rows],
        "same_statuses": bool(both) and all(a[k]["status"] == b[k]["status"] for k in both),
        "status_differences": [list(k) + [a[k]["status"], b[k]["status"]] for k in both
                               if a[k]["status"] != b[k]["status"]],
        "same_max_abs_error": sum(a[k].get("max_abs_error") == b[k].get("max_abs_error") for k in both),
        "ms_ratio": {"median": statistics.median(ratios.values()), "min": min(ratios.values()),
                     "max": max(ratios.values()), "n": len(ratios),
                     "over_1.10": sorted("/".join(k) + f" {v:.3f}" for k, v in ratios.items() if v > 1.1)}
        if ratios else None,
        "wall_s": wall[0], f"wall_s_{ref_name}": wall[1],
        "wall_overhead": (wall[0] / wall[1] - 1) if done and ref_done and None not in wall else None,
        "elapsed_s_in_results": meta.get("elapsed_s"),
        "scale_meta": {k: v for k, v in (meta.get("scale") or {}).items() if k != "timeline"},
        "timeline": timeline(name, meta),
        "items_vs_" + ref_name: item_deltas(meta, runs[ref_name][1]),
        "error": None if done else last_error(name),
    }


def item_deltas(meta, ref_meta):
    """Each item's own seconds (in its worker) against the same item's in the reference run: the first item's extra
    (a worker's first use of the device and of the items' modules), the rest's, and the five largest."""
    items = {tuple(i["item"]): i["seconds"] for i in ((meta.get("scale") or {}).get("timeline") or {}).get("items", [])
             if i.get("item")}
    ref = [(tuple(i["item"]), i["seconds"]) for i in ((ref_meta.get("scale") or {}).get("timeline") or {}).get("items", [])
           if i.get("item")]
    d = [(k, items[k] - s) for k, s in ref if k in items]
    if not d:
        return None
    top = sorted(d[1:], key=lambda x: -x[1])[:5]
    return {"first_extra_s": round(d[0][1], 3), "rest_extra_s": round(sum(x for _, x in d[1:]), 3),
            "largest": [f"{k[0]}/{k[1][:8]} {x:+.3f}" for k, x in top]}


try:
    ray_version = (out / "ray_version.txt").read_text().split()[1]
except (OSError, IndexError):
    ray_version = None
metas = [m for _, m, _ in runs.values() if m]
summary = {
    "job": "scale_ray",
    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "commands": {**{n: f"solkit bench {plan} {flag}".strip() for n, flag in RUNS.items()},
                 "cluster": "ray start --head --node-ip-address=127.0.0.1 --num-gpus=1 --num-cpus=$(nproc) "
                            "--object-store-memory=2000000000 --include-dashboard=false --disable-usage-stats "
                            "(RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0)"},
    "order": list(RUNS),
    "device": metas[0].get("device") if metas else None,
    "versions": dict((metas[0].get("versions") if metas else None) or {}, ray=ray_version),
    "ray_start": (out / "ray_start.rc").read_text().strip() if (out / "ray_start.rc").exists() else None,
    "serial": {"complete": base_done, "rows": len(base), "wall_s": walls.get("serial"),
               "elapsed_s_in_results": base_meta.get("elapsed_s"),
               "error": None if base_done else last_error("serial"), "timeline": timeline("serial", base_meta)},
    "ray_vs_serial": compare("ray"),
    "devices0_vs_serial": compare("devices0"),
    "ray_vs_devices0": compare("ray", "devices0"),
    "same_device_uuid": len({r.get("device_uuid") for rows, _, _ in runs.values() for r in rows}) == 1,
    "ray_devices": runs["ray"][1].get("devices"),
}
(out / "scale_ray.json").write_text(json.dumps(summary, indent=1))
short = {k: summary[k] for k in ("ray_start", "serial", "same_device_uuid")}
for name in ("ray_vs_serial", "devices0_vs_serial", "ray_vs_devices0"):
    c = summary[name]
    short[name] = {k: c[k] for k in ("complete", "rows", "same_rows_in_order", "same_statuses", "same_max_abs_error",
                                     "ms_ratio", "wall_s", "wall_overhead", "error", "timeline")}
    short[name]["items"] = next(v for k, v in c.items() if k.startswith("items_vs_"))
    if short[name]["ms_ratio"]:
        short[name]["ms_ratio"] = {k: v for k, v in c["ms_ratio"].items() if k != "over_1.10"}
print(json.dumps(short, indent=1))
w = walls.get
r = lambda a, b: f"{w(a) / w(b):.3f}" if runs[a][2] and runs[b][2] and w(a) and w(b) else "n/a (a run incomplete)"  # noqa: E731
print(f"walls: ray {w('ray')} s, serial {w('serial')} s, devices0 {w('devices0')} s; "
      f"ray/serial {r('ray', 'serial')}, ray/devices0 {r('ray', 'devices0')}, devices0/serial {r('devices0', 'serial')}")
PY
