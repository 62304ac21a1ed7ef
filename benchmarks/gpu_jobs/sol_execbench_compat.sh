#!/usr/bin/env bash
# budget: 240
# SOL-ExecBench's command lines (`solkit eval PROBLEM_DIR --solution S -o T --json`, and the explicit
# --definition/--workload/--config form) on the GPU: SOL-ExecBench's own tests/ samples and public examples (from
# the bare mirror the lead carries as .sxb_mirror/repo, when present), then solkit's samples; each case's statuses
# against what SOL-ExecBench expects.
# 1. Alone on the machine: `solkit eval-suite tests/harness/examples --solution-glob solution_pytorch.json` in one
#    process, the per-phase evaluation time (launch, load, judge, startup, compile, reference, correctness, timing,
#    checks) and each evaluation's timeline; overhead per workload = (wall clock - every timing phase) / workloads,
#    the issue's "at most 3 s per workload on top of the timed work".
# 2. Every case, 6 at a time on the one GPU, the first 2 workloads each: statuses only (times of concurrent cases
#    say nothing); a case that differs is run again alone while time allows.
# Results: $OUT/sol_execbench_compat.json.
#   bash benchmarks/gpu_jobs/run_round.sh sol_execbench_compat
set -u
{
  echo "# sol_execbench_compat: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness.languages import status; import json; print(json.dumps(status()))" || true
} 2>&1 | tee "$OUT/env.txt"
start=$(date +%s)
MIRROR=()
for m in .sxb_mirror/repo .sxb_mirror .clean/.sxb_mirror/repo; do
  if [ -f "$m/HEAD" ]; then MIRROR=(--mirror "$m"); break; fi
done
echo "mirror: ${MIRROR[*]:-none}"
# The suite gets 35 s (cut, it counts the problems it finished); then the cases, 6 at a time, the nvcc builds first
# (120 s each at most: 60 s was too short with 8 cases at once), the others 40 s each, starting until 55 s before
# the job's budget ($BUDGET from run_round.sh; SXB_BUILDS=0 leaves the builds out). One failing case never stops
# the others.
B=${BUDGET:-240}
BUILDS=(); [ "${SXB_BUILDS:-1}" = 0 ] && BUILDS=(--skip-built)
python3 benchmarks/sol_execbench_compat.py --device cuda:0 ${MIRROR[@]+"${MIRROR[@]}"} --suite --suite-glob solution_pytorch.json \
  --suite-timeout 35 --jobs 6 --max-workloads 2 --timeout 40 --build-timeout 120 ${BUILDS[@]+"${BUILDS[@]}"} \
  --deadline $((B - 65)) --rerun-deadline $((B - 60)) \
  --out "$OUT/sol_execbench_compat.json" 2>&1 | tee "$OUT/console.txt"
rc=${PIPESTATUS[0]}
echo "sol_execbench_compat rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/console.txt"
# The lock-clocks refusal is one line and exit 2, on the GPU too.
python3 -m solkit eval tests/harness/compat_samples/vecadd_triton_ref --lock-clocks >"$OUT/lock_clocks.txt" 2>&1
echo "lock-clocks rc=$? $(head -c 160 "$OUT/lock_clocks.txt")"
exit "$rc"
