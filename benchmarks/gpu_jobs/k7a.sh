# budget: 60
# Issue 7 (norms), this session's round 3 (small): the RMSNorm forwards against torch.compile, which won
# the Llama-3-70B RMSNorm forward in round 2 (63.8 us against solkit's 68.0; kernels_norm_round4.json).
# Harness protocol (timing.benchmark method auto = graph_events for calls < 0.1 ms, read L2 flush).
# 0. torch.compile warm-up in the background (fills Inductor's disk caches) while the GPU tests run.
# 1. bf16 GPU tests of rmsnorm (the looped forward is now the default with the residual and at 8192 wide).
# 2. the looped forward with a prefetch of the next chunk in both passes against round 2's defaults and
#    the one-block kernel, at 8192x8192 (RMSNorm, add+RMSNorm) and 8192x4096 (add+RMSNorm); the fastest is
#    adopted in-process (recorded), then A/B rounds of solkit, Liger and torch.compile, 6 alternating rounds.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
START=$(date +%s)
left() { echo $(( 56 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
TORCHINDUCTOR_COMPILE_THREADS=2 timeout 30 python3 kernels_norm.py --precompile --ops rmsnorm_70b,add_rmsnorm_70b,rmsnorm,add_rmsnorm \
  > "$OUT/precompile_norm.txt" 2>&1 &
P1=$!
cd ..
timeout 18 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" tests/kernels/test_rmsnorm.py 2>&1 \
  | tail -n 15 | tee "$OUT/pytest_gpu.txt"
cd benchmarks
wait $P1
tail -n 4 "$OUT/precompile_norm.txt"
T=$(left)
timeout "$T" python3 kernels_norm.py --only-sweep --no-stream --no-compile \
  --ops rmsnorm_70b,add_rmsnorm_70b,rmsnorm,add_rmsnorm --sweep --sweep-budget-s 22 --reps 20 --trials 3 \
  --sweep-ops rmsnorm_70b_fwd_prefetch,add_rmsnorm_70b_fwd_prefetch,add_rmsnorm_fwd_prefetch --adopt-norm-fwd \
  --ab rmsnorm_70b,add_rmsnorm_70b,rmsnorm,add_rmsnorm --ab-rounds 6 --ab-compile \
  --out "$OUT/kernels_norm_round4c.json" 2>&1 | tee "$OUT/norm.txt" | grep -v "^ *$" | tail -n 40
echo "norm rc=${PIPESTATUS[0]} left=$(left)s"
date -u
