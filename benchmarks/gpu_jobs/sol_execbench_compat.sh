#!/usr/bin/env bash
# budget: 240
# SOL-ExecBench-style command lines (`solkit eval PROBLEM_DIR --solution S -o T --json`, and the explicit
# --definition/--workload/--config form) on the GPU, against solkit's CPU-checked samples (tests/harness/
# compat_samples, tests/harness/examples): statuses as expected, and the per-phase evaluation time (launch, load,
# judge, start-up, compile, reference, correctness, timing, checks) with each evaluation's timeline (when the fork
# server, the reference and the candidate processes started and were ready). First `solkit eval-suite` over
# tests/harness/examples in one process (one-off costs shared, as a suite of many problems runs them), then each
# case as its own command. Overhead per workload = (wall clock of the command - every timing phase) / workloads:
# the issue's "at most 3 s per workload on top of the timed work". Results: $OUT/sol_execbench_compat.json.
#   bash benchmarks/gpu_jobs/run_round.sh sol_execbench_compat
set -u
{
  echo "# sol_execbench_compat: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness.languages import status; import json; print(json.dumps(status()))" || true
} 2>&1 | tee "$OUT/env.txt"
start=$(date +%s)
# The suite, then each case in its own solkit process; one failing case never stops the others. Cases start
# until 170 s (the budget leaves one 45 s case after that).
python3 benchmarks/sol_execbench_compat.py --device cuda:0 --suite --suite-timeout 120 --timeout 45 --deadline 170 \
  --out "$OUT/sol_execbench_compat.json" 2>&1 | tee "$OUT/console.txt"
rc=${PIPESTATUS[0]}
echo "sol_execbench_compat rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/console.txt"
# The lock-clocks refusal is one line and exit 2, on the GPU too.
python3 -m solkit eval tests/harness/compat_samples/vecadd_triton_ref --lock-clocks >"$OUT/lock_clocks.txt" 2>&1
echo "lock-clocks rc=$? $(head -c 160 "$OUT/lock_clocks.txt")"
exit "$rc"
