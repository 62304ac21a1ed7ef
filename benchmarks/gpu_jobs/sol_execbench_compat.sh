#!/usr/bin/env bash
# budget: 540
# SOL-ExecBench's command lines on the GPU, and the judge's overhead per workload on SOL-ExecBench's own examples.
# Needs the bare mirror of NVIDIA/SOL-ExecBench carried as .sxb_mirror/repo, and the nvidia-cutlass headers wheel
# (.whl_cutlass/, installed into /tmp/site here when cutlass_library is not importable).
# 1. FIRST, alone on the machine (nothing else runs): SOL-ExecBench's public examples with Python solutions,
#    examples/pytorch/* and examples/triton/* copied out of the mirror, unedited (5 problems, 26 workloads;
#    gemma3_swiglu's bf16 512x3072x24576 GEMMs included): `solkit eval-suite ROOT --solution-glob 'solution_*.json'`,
#    serially in one process, the next evaluations' candidate processes started ahead (--lookahead, auto), capped
#    at 150 s. Printed: (wall - timing - reference_timing) / workloads against the issue's 3 s, the seconds of every
#    phase (launch, load, judge, startup, lookahead, compile, reference, reference_timing, correctness, timing,
#    checks) in total and per workload, and per evaluation its one-off phases, its timeline and its own phases per
#    workload. Files: $OUT/suite_sxb/ (traces, summary.json with time_s), $OUT/suite_sxb_time.json.
# 2. Then every case of benchmarks/sol_execbench_compat.py (SOL-ExecBench's tests/ samples and public examples from
#    the mirror, and solkit's own samples), 6 at a time: the nvcc builds first, the heaviest first, at most 3 of them
#    at once (CPU-bound), 240 s each, the others 60 s, the first 2 workloads each. A case starts only if its timeout
#    ends before the job's end, or, when that no longer fits, with the time left if that is at least 90 s. The JSON
#    is written after every case: $OUT/sol_execbench_compat.json. Statuses only (times of concurrent cases say
#    nothing); a case that differs is run again alone while time allows.
# 3. If time is left: solkit's own examples (tests/harness/examples, PyTorch solutions) as in 1, the second figure:
#    $OUT/suite/, $OUT/suite_time.json.
#   bash benchmarks/gpu_jobs/run_round.sh sol_execbench_compat
# SXB_ONLY (comma-separated substrings of case names), SXB_JOBS and SXB_TIMEOUT (part 2), SXB_SUITE_CAP (part 1).
# A dry run on a CPU: SXB_DEVICE=cpu SXB_ONLY=evil SXB_MIRROR=GIT_DIR/repo OUT=DIR bash THIS (part 1 without
# gemma3_swiglu, whose bf16 GEMMs a CPU takes minutes over, and 2 workloads per problem).
set -u
start=$(date +%s)
B=${BUDGET:-540}
DEV=${SXB_DEVICE:-cuda:0}
left() { echo $((B - ($(date +%s) - start))); }
MIRROR=()
for m in ${SXB_MIRROR:-} .sxb_mirror/repo .sxb_mirror .clean/.sxb_mirror/repo; do
  if [ -f "$m/HEAD" ]; then MIRROR=(--mirror "$m"); break; fi
done
if [ "$DEV" != cpu ] && ! python3 -c "import cutlass_library" 2>/dev/null && ls .whl_cutlass/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl_cutlass/*.whl || true
fi
{
  echo "# sol_execbench_compat: $(date -u +%FT%TZ) budget ${B}s, mirror: ${MIRROR[*]:-none}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness.languages import status; import json; print(json.dumps(status()))" || true
} 2>&1 | tee "$OUT/env.txt"

suite() {  # $1: output folder, $2: seconds, $3: the suite's root, $4: its --solution-glob, then extra flags
  local dir=$1 cap=$2 root=$3 glob=$4
  shift 4
  local t0
  t0=$(date +%s.%N)
  local fast=()  # a CPU dry run: short timing, 2 workloads each
  [ "$DEV" = cpu ] && fast=(--cpu-threads 1 --cpu-timing-budget 0.3 --timing-trials 1 --max-workloads 2)
  echo "== eval-suite $root --solution-glob '$glob' ${*} (cap ${cap}s)"
  timeout --kill-after=5 "$cap" python3 -m solkit eval-suite "$root" -o "$dir" --json --device "$DEV" \
    --rerun --solution-glob "$glob" ${fast[@]+"${fast[@]}"} "$@" >"$dir.stdout.json" 2>"$dir.stderr.txt"
  echo "eval-suite $* rc=$? (cap ${cap}s)"
  python3 - "$dir" "$t0" <<'EOF' || true
import json, sys, time
from pathlib import Path
from solkit.harness.phases import RUN_PHASES, TIMED_PHASES, WORKLOAD_PHASES, suite_time
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
print(f"OVERHEAD (wall - {' - '.join(TIMED_PHASES[::-1])}) per workload: {over} s, lookahead {summary.get('lookahead')} "
      f"(goal <= 3 s: {'met' if over is not None and over <= 3 else 'NOT met'})"
      f" over {t.get('workloads')} workloads, {t.get('evaluations')} evaluations, wall {t.get('wall_s')} s"
      + (" (cut: up to the last problem written)" if t.get("cut") else ""))
ph = t.get("phases_s", {})
print("  seconds, total:       " + ", ".join(f"{k} {ph.get(k, 0):.2f}" for k in (*RUN_PHASES, *WORKLOAD_PHASES)))
print("  seconds per workload: " + ", ".join(f"{k} {ph.get(k, 0) / n:.2f}" for k in (*RUN_PHASES, *WORKLOAD_PHASES)))
groups: dict = {}
for tr in traces:
    groups.setdefault((tr.definition, tr.solution), []).append(tr)
for (definition, _), group in groups.items():
    recs = [(tr.evaluation.solkit or {}).get("phases_s") or {} for tr in group]
    p = recs[0]
    statuses = ",".join(sorted({tr.evaluation.status.value for tr in group}))
    print(f"  {definition[:28]:28} {statuses:10} {len(group)} workloads, run {p.get('run')}")
    own = {k: sum(r.get(k) or 0.0 for r in recs) / len(recs) for k in WORKLOAD_PHASES}
    mean = sum(r.get("overhead_per_workload") or 0.0 for r in recs) / len(recs)
    print("    per workload: " + ", ".join(f"{k} {v:.2f}" for k, v in own.items())
          + f"; overhead_per_workload {mean:.2f}")
    for part in ("reference_parts", "judge_parts"):  # where the reference and the judge's own work went
        keys = sorted({k for r in recs for k in (r.get(part) or {})})
        if keys:
            print(f"    {part} per workload: " + ", ".join(
                f"{k} {sum((r.get(part) or {}).get(k) or 0.0 for r in recs) / len(recs):.2f}" for k in keys))
    print(f"    timeline {p.get('timeline')}")
t["statuses"] = [tr.evaluation.status.value for tr in traces]
(out.parent / (out.name + "_time.json")).write_text(json.dumps(t, indent=1))
EOF
}

# 1. The overhead on SOL-ExecBench's own examples, alone on the machine.
SXB_ROOT=$(mktemp -d /tmp/sxb_examples.XXXXXX)
PREFIXES=(examples/pytorch examples/triton)
[ "$DEV" = cpu ] && PREFIXES=(examples/pytorch/linear_backward examples/triton)  # bf16 GEMMs: minutes on a CPU
erc=1
if [ ${#MIRROR[@]} -gt 0 ]; then
  exported=$(python3 benchmarks/sol_execbench_compat.py "${MIRROR[@]}" --export "$SXB_ROOT" --export-prefix "${PREFIXES[@]}" 2>&1)
  erc=$?
  echo "$exported" | tee -a "$OUT/console.txt"
fi
if [ "$erc" = 0 ]; then
  suite "$OUT/suite_sxb" "${SXB_SUITE_CAP:-150}" "$SXB_ROOT" 'solution_*.json' 2>&1 | tee -a "$OUT/console.txt"
else
  echo "no SOL-ExecBench mirror: no overhead figure on its examples" | tee -a "$OUT/console.txt"
fi
rm -rf "$SXB_ROOT"

# 2. Every case; the JSON after each. The end keeps 25 s for the lock-clocks check and the summary.
echo "cases: $(left) s left" | tee -a "$OUT/console.txt"
BUILDS=(); [ "${SXB_BUILDS:-1}" = 0 ] && BUILDS=(--skip-built)
END=$(( $(left) - 25 ))
python3 benchmarks/sol_execbench_compat.py --device "$DEV" ${MIRROR[@]+"${MIRROR[@]}"} ${SXB_ONLY:+--only "$SXB_ONLY"} \
  --jobs "${SXB_JOBS:-6}" --build-jobs 3 --max-workloads 2 --timeout "${SXB_TIMEOUT:-60}" --build-timeout 240 --min-timeout 90 \
  ${BUILDS[@]+"${BUILDS[@]}"} --end "$END" --rerun-deadline $((END - 60)) \
  --out "$OUT/sol_execbench_compat.json" 2>&1 | tee -a "$OUT/console.txt"
rc=${PIPESTATUS[0]}
echo "sol_execbench_compat rc=$rc; $(left) s left" | tee -a "$OUT/console.txt"

# The lock-clocks refusal is one line and exit 2, on the GPU too.
timeout 20 python3 -m solkit eval tests/harness/compat_samples/vecadd_triton_ref --lock-clocks >"$OUT/lock_clocks.txt" 2>&1
echo "lock-clocks rc=$? $(head -c 160 "$OUT/lock_clocks.txt")"

# 3. solkit's own examples, the second figure, if the time is there.
if [ "$(left)" -gt 60 ]; then
  suite "$OUT/suite" $(( $(left) - 8 )) tests/harness/examples solution_pytorch.json 2>&1 | tee -a "$OUT/console.txt"
else
  echo "no time left for the eval-suite over solkit's own examples" | tee -a "$OUT/console.txt"
fi
exit "$rc"
