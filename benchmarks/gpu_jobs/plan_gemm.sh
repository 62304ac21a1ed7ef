#!/usr/bin/env bash
# budget: 420
# The maintained plan benchmarks/plans/gemm.yaml; the result JSON goes to $OUT (copy it to benchmarks/results/gemm/).
#   bash benchmarks/gpu_jobs/run_round.sh plan_gemm
set -u
python3 benchmarks/run.py benchmarks/plans/gemm.yaml --out "$OUT"
