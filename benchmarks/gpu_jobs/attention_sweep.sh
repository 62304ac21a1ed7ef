#!/usr/bin/env bash
# budget: 240
# Prefill attention forward: the structure and launch-setting sweep of issue 23 (lab/benchmarks/attention_sweep.py
# --part fwd): every tile / warps / stages / TMA-or-pointer config at Llama-3-8B heads, the structure knobs of
# prefill.STRUCTURE (one causal loop, exp without the folded scale, lazy rescale, eager normalisation, the next
# tile's Q K^T before this tile's softmax), warp_spec and any warp-specialisation compiler options of the Triton
# build, then the best at 70B heads; SDPA cuDNN/flash/efficient in the same run. The configs are compiled first by a
# pool of spawned workers into one Triton cache under /tmp (so the count compiled fits the budget), then each is
# checked against fp32 and timed. Before it, the lab's Gluon forward (two consumer warpgroups fed by a TMA loader
# warp) at both shapes -> $OUT/attention_gluon.json. Copy both JSON files to
# benchmarks/results/attention/<date>_h200_sweep_fwd.json and <date>_h200_gluon_fwd.json.
#   bash benchmarks/gpu_jobs/run_round.sh attention_sweep
set -u
export TRITON_CACHE_DIR=/tmp/triton_attn_sweep PYTHONUNBUFFERED=1
{
  echo "# attention_sweep: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
} 2>&1 | tee "$OUT/env.txt"
# the Gluon forward (lab/kernels/attention_gluon.py: two consumer warpgroups and a TMA loader warp) first, capped,
# so that a hang there cannot eat the sweep's time
timeout 50 python3 lab/benchmarks/attention_sweep.py --part gluon --deadline 42 --out "$OUT/attention_gluon.json" \
  2>&1 | grep -v -e UserWarning -e "^  " | tee "$OUT/gluon.txt" | grep -e "^\[.*\] gluon" | cut -c1-240
echo "gluon rc=${PIPESTATUS[0]}"
timeout 178 python3 lab/benchmarks/attention_sweep.py --part fwd --deadline 138 --out "$OUT/attention_sweep.json" \
  2>&1 | grep -v -e UserWarning -e "^  " | tee "$OUT/sweep.txt" | grep -e "^\[.*\] \(best\|rival\|precompiled\|ceilings\)"
echo "sweep rc=${PIPESTATUS[0]}"
