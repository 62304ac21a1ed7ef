#!/usr/bin/env bash
# budget: 200
# Prefill attention backward and decode attention, issue 23's sweeps. (1) lab/benchmarks/attention_sweep.py --part bwd:
# the backward alone (the forward's saved output and logsumexp as inputs) over dK/dV and dQ tiles, warps and stages,
# the 5-GEMM atomic-dQ structure, TMA and pointer loads, at Llama-3-8B heads, the best again at 70B heads, SDPA's
# cuDNN/flash backward alone beside it; compiled first by spawned workers into one Triton cache under /tmp.
# (2) benchmarks/rivals_decode.py --parts decode,decode_sweep: the paged split-KV decode (fused and kernel combine)
# at batch 1/8/64 x KV 8k/32k/128k against SDPA per backend (FlashInfer where importable), then its launch settings
# at 32k keys. Copy $OUT/attention_sweep_bwd.json to benchmarks/results/attention/<date>_h200_sweep_bwd.json and
# $OUT/decode/ to benchmarks/results/attention/<date>_h200_decode/.
#   bash benchmarks/gpu_jobs/run_round.sh attention_sweep_bwd
set -u
export TRITON_CACHE_DIR=/tmp/triton_attn_sweep PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" \
  2>&1 | tee "$OUT/env.txt"
timeout 120 python3 lab/benchmarks/attention_sweep.py --part bwd --deadline 80 --top 4 \
  --out "$OUT/attention_sweep_bwd.json" 2>&1 | grep -v -e UserWarning -e "^  " | tee "$OUT/sweep_bwd.txt" \
  | grep -e "^\[.*\] \(best\|rival\|precompiled\|ceilings\)"
echo "sweep bwd rc=${PIPESTATUS[0]}"
timeout 70 python3 benchmarks/rivals_decode.py --out "$OUT/decode" --parts decode,decode_sweep 2>&1 \
  | grep -v -e UserWarning -e "call = " >"$OUT/decode.txt"
echo "decode rc=${PIPESTATUS[0]}"
grep -e '"impl": "solkit_paged"' -e '"impl": "sdpa_cudnn"' "$OUT/decode.txt" | grep -v options | cut -c1-200
