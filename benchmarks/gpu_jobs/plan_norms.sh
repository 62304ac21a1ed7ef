#!/usr/bin/env bash
# budget: 420
# The maintained plan benchmarks/plans/norms.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/norms/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_norms
set -u
python3 benchmarks/run.py benchmarks/plans/norms.yaml --out "$OUT"
