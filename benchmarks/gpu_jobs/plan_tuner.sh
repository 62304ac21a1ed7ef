#!/usr/bin/env bash
# budget: 240
# The maintained plan benchmarks/plans/tuner.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/tuner/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_tuner
set -u
python3 benchmarks/run.py benchmarks/plans/tuner.yaml --out "$OUT"
