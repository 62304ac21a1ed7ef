#!/usr/bin/env bash
# budget: 130
# Issue 21's over-count (536 ms of kernels counted in a 175 ms eager step, 365 ms of it on _foreach_addcdiv): the raw
# profiler events of one HF Llama train step (Llama-3-8B shapes, 4 layers, 8192 tokens, bf16, AdamW foreach),
# profiled as solkit.model.analyze does (eager with and without solkit's module ranges; compiled), dumped by
# benchmarks/gpu_jobs/model_profile_probe.py: device events by activity type, the CPU ops carrying the most device
# time and the events linked to them, correlation-id collisions, the per-stream union of device intervals vs the wall
# time. Results: $OUT/probe_eager.json, $OUT/probe_compiled.json, Chrome traces $OUT/trace*.json.gz, and the log.
#   bash benchmarks/gpu_jobs/run_round.sh model_profile_probe
set -u
OUT=${OUT:?OUT must be set}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor_model_llama}
start=$(date +%s)
timeout --kill-after=5 50 python3 benchmarks/gpu_jobs/model_profile_probe.py "$OUT" 2>&1 | grep -v '^USDT'
echo "eager probe rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - start ))s"
start=$(date +%s)
timeout --kill-after=5 70 python3 benchmarks/gpu_jobs/model_profile_probe.py "$OUT" --compile 2>&1 | grep -v '^USDT'
echo "compiled probe rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - start ))s"
