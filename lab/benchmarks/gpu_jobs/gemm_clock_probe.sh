#!/usr/bin/env bash
# budget: 100
# Issue 21, lab probe: the SM clock (a fixed-cycle spin right before each GEMM) of the Llama step's GEMMs inside the
# step and alone (idle gap, back to back, behind the step's largest GEMM); lab/benchmarks/gemm_clock_probe.py says
# why. $OUT/probe.json.
#   bash benchmarks/gpu_jobs/run_round.sh gemm_clock_probe
set -u
OUT=${OUT:?OUT must be set}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader || true
timeout --kill-after=5 90 python3 lab/benchmarks/gemm_clock_probe.py "$OUT/probe.json" --layers 2 --reps 20 2>&1 \
  | grep -v '^USDT'
echo "probe rc=${PIPESTATUS[0]}"
