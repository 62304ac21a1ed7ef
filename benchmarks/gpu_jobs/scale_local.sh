#!/usr/bin/env bash
# budget: 200
# The local pool's overhead on one H200 (issue 25): `solkit bench --size m --backends eager,vendor` serially and
# with `--devices 0` (one pinned worker process), quick calibration (measured once, cached per GPU UUID, shared by
# both runs). Compares the two runs row by row (same rows and statuses? time ratio per row) and their wall times;
# writes $OUT/scale_local.json (device, date, versions, commit, commands, walls, overhead, row comparison). A run
# cut by its time cap is compared on the rows its checkpoint (results.partial.json) holds. Ray is not on the
# device (79 MB wheel), so the Ray path is not measured here; the multi-GPU scaling run is issue 26.
#   bash benchmarks/gpu_jobs/run_round.sh scale_local
set -u
OUT=${OUT:?OUT must be set}
export SOLKIT_CACHE_DIR=${SOLKIT_CACHE_DIR:-/tmp/solkit_cache_scale}
PLAN=(--size m --backends eager,vendor --calibration quick --json)
timeout 40 python3 -m solkit.cli calibrate --quick --json >"$OUT/calibration.json" 2>"$OUT/calibrate_log.txt"
echo "calibrate rc=$?"
run() {  # run NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  local start=$(date +%s.%N)
  timeout --kill-after=5 "$secs" python3 -m solkit.cli bench "${PLAN[@]}" --out "$OUT/$name" "$@" \
    >"$OUT/$name.stdout.json" 2>"$OUT/$name.stderr.txt"
  local rc=$?
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$(date +%s.%N)" \
    >"$OUT/$name.wall"
  echo "$name rc=$rc wall=$(cat "$OUT/$name.wall")s" | tee -a "$OUT/runs.txt"
  tail -n 3 "$OUT/$name.stderr.txt"
}
run serial 75
run devices0 75 --devices 0
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


runs = {n: load(n) for n in ("serial", "devices0")}
key = lambda r: (r["problem"], r["workload"], r["backend"])  # noqa: E731
(a_rows, a_meta, a_done), (b_rows, b_meta, b_done) = runs["serial"], runs["devices0"]
a, b = {key(r): r for r in a_rows}, {key(r): r for r in b_rows}
both = [k for k in a if k in b]
ratios = [b[k]["ms"] / a[k]["ms"] for k in both if a[k].get("ms") and b[k].get("ms")]
walls = {n: float((out / f"{n}.wall").read_text()) for n in runs if (out / f"{n}.wall").exists()}
summary = {
    "job": "scale_local",
    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "commands": {"serial": f"solkit bench {plan}", "devices0": f"solkit bench {plan} --devices 0"},
    "device": a_meta.get("device") or b_meta.get("device"),
    "versions": a_meta.get("versions") or b_meta.get("versions"),
    "complete": {"serial": a_done, "devices0": b_done},
    "rows": {"serial": len(a), "devices0": len(b), "both": len(both)},
    "same_statuses": all(a[k]["status"] == b[k]["status"] for k in both),
    "status_differences": [list(k) + [a[k]["status"], b[k]["status"]] for k in both if a[k]["status"] != b[k]["status"]],
    "same_device_uuid": len({r.get("device_uuid") for r in a_rows + b_rows}) == 1,
    "ms_ratio_devices0_over_serial": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                                      "n": len(ratios)} if ratios else None,
    "wall_s": walls,
    "elapsed_s_in_results": {"serial": a_meta.get("elapsed_s"), "devices0": b_meta.get("elapsed_s")},
    "pool_overhead": (walls["devices0"] / walls["serial"] - 1) if a_done and b_done and len(walls) == 2 else None,
    "scale_meta": b_meta.get("scale"),
}
(out / "scale_local.json").write_text(json.dumps(summary, indent=1))
print(json.dumps({k: summary[k] for k in ("complete", "rows", "same_statuses", "same_device_uuid",
                                           "ms_ratio_devices0_over_serial", "wall_s", "pool_overhead")}, indent=1))
PY
