#!/usr/bin/env bash
# budget: 420
# The maintained plan benchmarks/plans/softmax.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/softmax/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_softmax
set -u
python3 benchmarks/run.py benchmarks/plans/softmax.yaml --out "$OUT"
