#!/usr/bin/env bash
# budget: 90
# Issue 21, lab probe: the Llama step's GEMMs with their local GEMM duty (+-10 ms), and each layout timed alone at
# idle-gap duties 0.5-1.0 and with a memory-bound filler (lab/benchmarks/gemm_duty_probe.py says why). $OUT/probe.json.
#   bash benchmarks/gpu_jobs/run_round.sh gemm_duty_probe
set -u
OUT=${OUT:?OUT must be set}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.draw --format=csv,noheader || true
timeout --kill-after=5 80 python3 lab/benchmarks/gemm_duty_probe.py "$OUT/probe.json" --layers 2 --reps 20 2>&1 \
  | grep -v '^USDT'
echo "probe rc=${PIPESTATUS[0]}"
