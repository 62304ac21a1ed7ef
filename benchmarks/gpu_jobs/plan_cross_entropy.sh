#!/usr/bin/env bash
# budget: 240
# The maintained plan benchmarks/plans/cross_entropy.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/cross_entropy/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_cross_entropy
set -u
python3 benchmarks/run.py benchmarks/plans/cross_entropy.yaml --out "$OUT"
