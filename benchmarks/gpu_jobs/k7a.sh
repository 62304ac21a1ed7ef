# budget: 120
# Issue 7 (norms, softmax, RoPE), this session's round 1: variants at the Llama-3-70B shapes of the main
# job (hidden 8192; RoPE 64 q / 8 kv heads), then the GPU tests. Harness protocol throughout
# (timing.benchmark method auto = graph_events for calls < 0.1 ms, read L2 flush); every variant checked
# against an fp32/fp64 reference before it is timed; JSON rewritten after every row.
# 1. norms: the launcher sweep at 8192x8192 (backward as one program per SM against the spilling
#    4096-wide default, forward warps); the wide softmax defaults (split-row) and looped path at 128256
#    and 262144 columns after merging the split-row forward/backward kernels and the shared loops
#    (against round 3b's sweep); then forward A/B runs of RMSNorm and add+RMSNorm at 8192x4096 against
#    Liger (alternating turns).
# 2. RoPE at the 70B layout: the new per-shape default and launch variants against Liger, fwd and fwd+bwd.
# 3. bf16 GPU tests of rope, layernorm, rmsnorm and softmax (incl. the wide "auto" path and the merged
#    split-row kernel), with the time left (the >2^31-element and opt-in cooperative-softmax tests skipped:
#    those code paths are unchanged).
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
START=$(date +%s)
left() { echo $(( 114 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
cd benchmarks
timeout 55 python3 kernels_norm.py --only-sweep --no-stream --no-compile \
  --ops layernorm_70b,rmsnorm_70b,add_rmsnorm_70b,rmsnorm,add_rmsnorm,softmax_vocab,softmax_256k \
  --sweep --sweep-budget-s 38 --reps 20 --trials 3 \
  --sweep-ops layernorm_70b,softmax_256k_check,rmsnorm_70b,add_rmsnorm_70b,softmax_vocab_check \
  --ab rmsnorm,add_rmsnorm --ab-rounds 5 \
  --out "$OUT/kernels_norm_round4a.json" 2>&1 | tee "$OUT/norm.txt" | grep -v "^ *$" | tail -n 60
echo "norm rc=${PIPESTATUS[0]} left=$(left)s"
timeout 28 python3 kernels_rope.py --shapes 70b --variants --backends solkit,liger --budget-s 24 \
  --out "$OUT/kernels_rope_round4a.json" 2>&1 | tee "$OUT/rope.txt" | tail -n 30
echo "rope rc=${PIPESTATUS[0]} left=$(left)s"
cd ..
T=$(left)
if [ "$T" -gt 8 ]; then
  timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32 and not coop_gpu" \
    tests/kernels/test_rope.py tests/kernels/test_layernorm.py tests/kernels/test_rmsnorm.py \
    tests/kernels/test_softmax.py 2>&1 | tail -n 25 | tee "$OUT/pytest_gpu.txt"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
date -u
