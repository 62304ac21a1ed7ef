#!/usr/bin/env bash
# budget: 150
# SOL-ExecBench-style command lines (`solkit eval PROBLEM_DIR --solution S -o T --json`, and the explicit
# --definition/--workload/--config form) on the GPU, against solkit's CPU-checked samples (tests/harness/
# compat_samples, tests/harness/examples): statuses as expected, and the per-phase evaluation time (load,
# start-up, compile, reference, correctness, timing, checks; overhead per workload = all but timing) that
# docs/sol-execbench.md's 3 s-per-workload goal is about. Results: $OUT/sol_execbench_compat.json.
#   bash benchmarks/gpu_jobs/run_round.sh sol_execbench_compat
set -u
{
  echo "# sol_execbench_compat: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness.languages import status; import json; print(json.dumps(status()))" || true
} 2>&1 | tee "$OUT/env.txt"
start=$(date +%s)
# Each case in its own solkit process; one failing case never stops the others. Cases start until 120 s.
python3 benchmarks/sol_execbench_compat.py --device cuda:0 --timeout 45 --deadline 120 \
  --out "$OUT/sol_execbench_compat.json" 2>&1 | tee "$OUT/console.txt"
rc=${PIPESTATUS[0]}
echo "sol_execbench_compat rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/console.txt"
# The lock-clocks refusal is one line and exit 2, on the GPU too.
python3 -m solkit eval tests/harness/compat_samples/vecadd_triton_ref --lock-clocks >"$OUT/lock_clocks.txt" 2>&1
echo "lock-clocks rc=$? $(head -c 160 "$OUT/lock_clocks.txt")"
exit "$rc"
