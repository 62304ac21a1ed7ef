#!/usr/bin/env bash
# budget: 200
# The Ray path against the local path on one H200 (issue 25: "the Ray path runs `solkit bench --size m` with the
# same results as the local path, at <= 5 % extra wall time"). Needs .whl_ray (ray 2.60, slimmed by
# tools/slim_wheel.py --preset ray) carried. A one-node Ray cluster is started first (`ray start --head`, one GPU,
# loopback only, no dashboard, no usage stats, no auth token), as a user of a cluster would have it running;
# then `solkit bench --size m --backends eager,vendor --calibration quick --models llama3-8b --ray auto` (one
# actor with num_gpus=1) and the same command without --ray (in this process: the local path), in that order, so
# that warm file caches favour the local run. --models llama3-8b is half of the m class (all 20 problems, one of
# its two models), so that both runs fit the budget; SCALE_RAY_PLAN replaces the plan. The quick calibration is
# measured once beforehand and cached per GPU UUID, so neither run measures it. Compares rows, statuses, order,
# errors and per-row times, and the two wall times; writes $OUT/scale_ray.json (device, date, versions, commit,
# commands, walls, overhead, row comparison). A run cut by its time cap is compared on its checkpoint's rows.
#   bash benchmarks/gpu_jobs/run_round.sh scale_ray
set -u
OUT=${OUT:?OUT must be set}
export SOLKIT_CACHE_DIR=${SOLKIT_CACHE_DIR:-/tmp/solkit_cache_scale}
# No network, no dashboard, no telemetry: a one-host cluster on the loopback.
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled RAY_DISABLE_DOCKER_CPU_WARNING=1
read -r -a PLAN <<<"${SCALE_RAY_PLAN:---size m --backends eager,vendor --calibration quick --models llama3-8b}"
PLAN+=(--json)
RAY_GPUS=${SCALE_RAY_GPUS:-1}
RAYCLI=(python3 -c 'import sys; from ray.scripts.scripts import main; sys.argv[0] = "ray"; sys.exit(main())')
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

python3 -c "import ray; print('ray', ray.__version__, ray.__file__)" 2>&1 | tail -1 | tee "$OUT/ray_version.txt"
t=$(now)
timeout 40 python3 -m solkit.cli calibrate --quick --json >"$OUT/calibration.json" 2>"$OUT/calibrate_log.txt"
echo "calibrate rc=$? $(since "$t")s"

t=$(now)
timeout 40 "${RAYCLI[@]}" start --head --node-ip-address=127.0.0.1 --port=6399 --num-gpus="$RAY_GPUS" --num-cpus=2 \
  --object-store-memory=2000000000 --include-dashboard=false --disable-usage-stats >"$OUT/ray_start.txt" 2>&1
echo "ray start rc=$? $(since "$t")s" | tee -a "$OUT/runs.txt"
tail -n 3 "$OUT/ray_start.txt"

run() {  # run NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  local start; start=$(now)
  timeout --kill-after=5 "$secs" python3 -m solkit.cli bench "${PLAN[@]}" --out "$OUT/$name" "$@" \
    >"$OUT/$name.stdout.json" 2>"$OUT/$name.stderr.txt"
  local rc=$?
  since "$start" >"$OUT/$name.wall"
  echo "$name rc=$rc wall=$(cat "$OUT/$name.wall")s" | tee -a "$OUT/runs.txt"
  tail -n 3 "$OUT/$name.stderr.txt"
}
run ray 70 --ray auto
run local 70

t=$(now)
timeout 30 "${RAYCLI[@]}" stop --force >"$OUT/ray_stop.txt" 2>&1
echo "ray stop rc=$? $(since "$t")s"
# Ray's own logs, for a run that failed inside Ray (small: the job's session only).
tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray session_latest/logs 2>/dev/null || true

python3 - "$OUT" "${PLAN[*]}" <<'PY'
import datetime as dt, json, statistics, subprocess, sys
from pathlib import Path

out, plan = Path(sys.argv[1]), sys.argv[2]


def load(name):
    d = out / name
    if (d / "results.json").exists():
        res = json.loads((d / "results.json").read_text())
        return res["rows"], res["meta"], True
    if (d / "results.partial.json").exists():
        return json.loads((d / "results.partial.json").read_text()), {}, False
    return [], {}, False


key = lambda r: (r["problem"], r["workload"], r["backend"])  # noqa: E731
(l_rows, l_meta, l_done), (r_rows, r_meta, r_done) = load("local"), load("ray")
loc, ray = {key(r): r for r in l_rows}, {key(r): r for r in r_rows}
both = [k for k in loc if k in ray]
ratios = {k: ray[k]["ms"] / loc[k]["ms"] for k in both if loc[k].get("ms") and ray[k].get("ms")}
walls = {n: float((out / f"{n}.wall").read_text()) for n in ("local", "ray") if (out / f"{n}.wall").exists()}
try:
    ray_version = (out / "ray_version.txt").read_text().split()[1]
except (OSError, IndexError):
    ray_version = None
versions = dict(l_meta.get("versions") or r_meta.get("versions") or {}, ray=ray_version)
elapsed = {"local": l_meta.get("elapsed_s"), "ray": r_meta.get("elapsed_s")}
summary = {
    "job": "scale_ray",
    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "commands": {"ray": f"solkit bench {plan} --ray auto", "local": f"solkit bench {plan}",
                 "cluster": "ray start --head --node-ip-address=127.0.0.1 --num-gpus=1 --num-cpus=2 "
                            "--include-dashboard=false --disable-usage-stats (RAY_AUTH_MODE=disabled)"},
    "device": l_meta.get("device") or r_meta.get("device"),
    "versions": versions,
    "complete": {"local": l_done, "ray": r_done},
    "rows": {"local": len(loc), "ray": len(ray), "both": len(both)},
    "same_rows_in_order": [key(r) for r in l_rows] == [key(r) for r in r_rows],
    "same_statuses": bool(both) and all(loc[k]["status"] == ray[k]["status"] for k in both),
    "status_differences": [list(k) + [loc[k]["status"], ray[k]["status"]] for k in both
                           if loc[k]["status"] != ray[k]["status"]],
    "same_max_abs_error": sum(loc[k].get("max_abs_error") == ray[k].get("max_abs_error") for k in both),
    "same_device_uuid": len({r.get("device_uuid") for r in l_rows + r_rows}) == 1,
    "ms_ratio_ray_over_local": {"median": statistics.median(ratios.values()), "min": min(ratios.values()),
                                "max": max(ratios.values()), "n": len(ratios),
                                "over_1.10": sorted(["/".join(k) + f" {v:.3f}" for k, v in ratios.items() if v > 1.1])}
    if ratios else None,
    "wall_s": walls,
    "elapsed_s_in_results": elapsed,
    "ray_wall_overhead": (walls["ray"] / walls["local"] - 1) if l_done and r_done and len(walls) == 2 else None,
    "ray_elapsed_overhead": (elapsed["ray"] / elapsed["local"] - 1) if all(elapsed.values()) else None,
    "scale_meta": r_meta.get("scale"),
    "ray_devices": r_meta.get("devices"),
}
(out / "scale_ray.json").write_text(json.dumps(summary, indent=1))
show = ("complete", "rows", "same_rows_in_order", "same_statuses", "same_max_abs_error", "same_device_uuid",
        "ms_ratio_ray_over_local", "wall_s", "elapsed_s_in_results", "ray_wall_overhead", "ray_elapsed_overhead")
print(json.dumps({k: summary[k] for k in show}, indent=1))
PY
