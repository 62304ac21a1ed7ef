#!/usr/bin/env bash
# budget: 240
# The maintained plan benchmarks/plans/read_floor.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/read_floor/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_read_floor
set -u
python3 benchmarks/run.py benchmarks/plans/read_floor.yaml --out "$OUT"
