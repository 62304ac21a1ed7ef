#!/usr/bin/env bash
# budget: 240
# The maintained plan benchmarks/plans/gates_rope.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/gates_rope/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_gates_rope
set -u
python3 benchmarks/run.py benchmarks/plans/gates_rope.yaml --out "$OUT"
