#!/usr/bin/env bash
# budget: 230
# SOL-ExecBench's command lines on the GPU, and the judge's overhead per workload.
# 1. FIRST, alone on the machine (nothing else runs): `solkit eval-suite tests/harness/examples --solution-glob
#    solution_pytorch.json` (4 problems, 10 workloads), serially in one process, the next evaluations' candidate
#    processes started ahead (--lookahead, auto). Printed: (wall - every timing phase) / workloads against the
#    issue's 3 s, the seconds of every phase (launch, load, judge, startup, lookahead, compile, reference, correctness,
#    timing, checks) in total and per workload, and each evaluation's timeline. Files: $OUT/suite/ (traces,
#    summary.json with time_s), $OUT/suite_time.json.
# 2. Then every case of benchmarks/sol_execbench_compat.py (SOL-ExecBench's tests/ samples and public examples from
#    the bare mirror carried as .sxb_mirror/repo, and solkit's own samples), 6 at a time, the nvcc builds first with
#    120 s each, the others 40 s, the first 2 workloads each; a case starts only if its timeout ends before the job's
#    end, and the JSON is written after every case: $OUT/sol_execbench_compat.json. Statuses only (times of
#    concurrent cases say nothing).
# 3. If time is left: the same suite with --lookahead 0 (the overhead without the candidates started ahead).
#   bash benchmarks/gpu_jobs/run_round.sh sol_execbench_compat
set -u
start=$(date +%s)
B=${BUDGET:-230}
DEV=${SXB_DEVICE:-cuda:0}  # SXB_DEVICE=cpu SXB_ONLY=evil SXB_MIRROR=GIT_DIR/repo: a dry run on a CPU
left() { echo $((B - ($(date +%s) - start))); }
{
  echo "# sol_execbench_compat: $(date -u +%FT%TZ) budget ${B}s"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness.languages import status; import json; print(json.dumps(status()))" || true
} 2>&1 | tee "$OUT/env.txt"

suite() {  # $1: output folder, $2: seconds, then extra flags
  local dir=$1 cap=$2
  shift 2
  local t0
  t0=$(date +%s.%N)
  local fast=()  # a CPU dry run: short timing, 2 workloads each
  [ "$DEV" = cpu ] && fast=(--cpu-threads 1 --cpu-timing-budget 0.3 --timing-trials 1 --max-workloads 2)
  timeout --kill-after=5 "$cap" python3 -m solkit eval-suite tests/harness/examples -o "$dir" --json --device "$DEV" \
    --rerun --solution-glob solution_pytorch.json ${fast[@]+"${fast[@]}"} "$@" >"$dir.stdout.json" 2>"$dir.stderr.txt"
  echo "eval-suite $* rc=$? (cap ${cap}s)"
  python3 - "$dir" "$t0" <<'EOF' || true
import json, sys, time
from pathlib import Path
from solkit.harness.phases import RUN_PHASES, WORKLOAD_PHASES, suite_time
from solkit.problems.schema import Trace
out, t0 = Path(sys.argv[1]), float(sys.argv[2])
files = sorted(out.glob("*.traces.jsonl"))
traces = [Trace.model_validate_json(l) for f in files for l in f.read_text().splitlines() if l.strip()]
summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
t = summary.get("time_s")
if not t:  # cut by its cap: the wall clock up to the last problem written
    t = suite_time(traces, max((f.stat().st_mtime for f in files), default=time.time()) - t0)
    t["cut"] = True
t["command_wall_s"] = round(time.time() - t0, 2)
n = max(t.get("workloads", 0), 1)
over = t.get("overhead_per_workload_wall_s")
print(f"OVERHEAD (wall - timing) per workload: {over} s, lookahead {summary.get('lookahead')} (goal <= 3 s: {'met' if over is not None and over <= 3 else 'NOT met'})"
      f" over {t.get('workloads')} workloads, {t.get('evaluations')} evaluations, wall {t.get('wall_s')} s"
      + (" (cut: up to the last problem written)" if t.get("cut") else ""))
ph = t.get("phases_s", {})
print("  seconds, total:       " + ", ".join(f"{k} {ph.get(k, 0):.2f}" for k in (*RUN_PHASES, *WORKLOAD_PHASES)))
print("  seconds per workload: " + ", ".join(f"{k} {ph.get(k, 0) / n:.2f}" for k in (*RUN_PHASES, *WORKLOAD_PHASES)))
seen = set()
for tr in traces:
    p = (tr.evaluation.solkit or {}).get("phases_s") or {}
    key = (tr.definition, tr.solution)
    if key in seen:
        continue
    seen.add(key)
    print(f"  {tr.definition[:28]:28} {tr.evaluation.status.value:10} run {p.get('run')}")
    print(f"    timeline {p.get('timeline')}")
t["statuses"] = [tr.evaluation.status.value for tr in traces]
(out.parent / (out.name + "_time.json")).write_text(json.dumps(t, indent=1))
EOF
}

# 1. The overhead, alone on the machine.
suite "$OUT/suite" 60 2>&1 | tee "$OUT/console.txt"

# 2. Every case; the JSON after each. A case starts only if it can end 15 s before the budget (meta, lock-clocks).
MIRROR=()
for m in ${SXB_MIRROR:-} .sxb_mirror/repo .sxb_mirror .clean/.sxb_mirror/repo; do
  if [ -f "$m/HEAD" ]; then MIRROR=(--mirror "$m"); break; fi
done
echo "mirror: ${MIRROR[*]:-none}; $(left) s left" | tee -a "$OUT/console.txt"
BUILDS=(); [ "${SXB_BUILDS:-1}" = 0 ] && BUILDS=(--skip-built)
END=$(( $(left) - 15 ))
python3 benchmarks/sol_execbench_compat.py --device "$DEV" ${MIRROR[@]+"${MIRROR[@]}"} ${SXB_ONLY:+--only "$SXB_ONLY"} --jobs 6 --max-workloads 2 \
  --timeout 40 --build-timeout 120 ${BUILDS[@]+"${BUILDS[@]}"} --end "$END" --rerun-deadline $((END - 45)) \
  --out "$OUT/sol_execbench_compat.json" 2>&1 | tee -a "$OUT/console.txt"
rc=${PIPESTATUS[0]}
echo "sol_execbench_compat rc=$rc; $(left) s left" | tee -a "$OUT/console.txt"

# The lock-clocks refusal is one line and exit 2, on the GPU too.
timeout 20 python3 -m solkit eval tests/harness/compat_samples/vecadd_triton_ref --lock-clocks >"$OUT/lock_clocks.txt" 2>&1
echo "lock-clocks rc=$? $(head -c 160 "$OUT/lock_clocks.txt")"

# 3. The overhead without the lookahead, if the time is there (the suite with it took well under 50 s).
if [ "$(left)" -gt 55 ]; then
  suite "$OUT/suite_nolookahead" $(( $(left) - 8 )) --lookahead 0 2>&1 | tee -a "$OUT/console.txt"
else
  echo "no time left for the suite without the lookahead" | tee -a "$OUT/console.txt"
fi
exit "$rc"
