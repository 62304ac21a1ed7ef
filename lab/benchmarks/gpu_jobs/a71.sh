# budget: 240
# Wide softmax, session 7 round 1: the re-read forward (src/solkit/kernels/softmax/reread.py: the grouped exchange,
# pass 2 re-reads its chunk from L2 K rows after pass 1, no row held in registers across the wait) swept at
# 8192x128256 (chunk 2048/4096/8192 columns, warps, programs an SM, stages, skew K, TMA or plain loads for either
# read, eviction hints, L2 prefetch), twice, next to the session-6 default (TMA-staged packed) and the bare copy;
# then a few at 4096x128256 and 1024x262144. Every row checked against fp64 over every row first (plan a71 of
# lab/benchmarks/softmax_wide_plans.py). Compiles first, in 12 parallel processes. Then the re-read GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/a7_triton
START=$(date +%s)
left() { echo $(( 234 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3 4 5 6 7 8 9 10 11; do
  timeout 90 python3 kernels_softmax_wide.py --plan a71 --warm $k/12 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 50 ] && timeout $(( T - 25 )) python3 kernels_softmax_wide.py --plan a71 --reps 40 \
  --out "$OUT/kernels_softmax_wide_a71.json" --budget-s $(( T - 40 )) 2>&1 | tee "$OUT/a71.txt" | tail -n 80
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_reread.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
