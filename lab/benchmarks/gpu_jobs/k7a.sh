# budget: 60
# Issue 7 (norms, softmax, RoPE), a final check if a round is left: the bf16 GPU tests of the four kernel
# files with the committed defaults (the add+RMSNorm forward became the prefetching looped kernel after
# round 3's tests), then the add+RMSNorm table rows (solkit and Liger, checked against fp32 with the strict
# budget and timed with the harness protocol) at 8192x4096 and 8192x8192.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
START=$(date +%s)
left() { echo $(( 56 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 36 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32 and not coop_gpu" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py tests/kernels/test_rope.py tests/kernels/test_softmax.py \
  2>&1 | tail -n 15 | tee "$OUT/pytest_gpu.txt"
cd benchmarks
T=$(left)
[ "$T" -gt 6 ] && timeout "$T" python3 kernels_norm.py --ops add_rmsnorm,add_rmsnorm_70b --backends solkit,liger \
  --no-compile --no-stream --budget-s $(( T - 2 )) --out "$OUT/kernels_norm_round4d.json" 2>&1 | tail -n 12
date -u
