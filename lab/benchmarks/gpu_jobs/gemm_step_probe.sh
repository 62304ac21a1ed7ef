#!/usr/bin/env bash
# budget: 150
# Issue 21, lab probe: the decoder layers' backward GEMMs inside an HF Llama step (Llama-3-8B shapes, 2 layers, 8192
# tokens, bf16) against the same calls alone on the step's own operands, on a copy of them and on random data of the
# same layout (lab/benchmarks/gemm_step_probe.py says what each comparison separates). Results: $OUT/probe.json, log.
#   bash benchmarks/gpu_jobs/run_round.sh gemm_step_probe
set -u
OUT=${OUT:?OUT must be set}
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.draw --format=csv,noheader || true
timeout --kill-after=5 140 python3 lab/benchmarks/gemm_step_probe.py "$OUT/probe.json" --layers 2 --reps 15 2>&1 \
  | grep -v '^USDT'
echo "probe rc=${PIPESTATUS[0]}"
