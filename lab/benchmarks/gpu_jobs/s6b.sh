# budget: 200
# Wide softmax, session 6 round 2. Round 1 (benchmarks/results/softmax/2026-11-30_h200_wide_1520.json): the exact-tile rows forward at
# 14336 with 2 programs an SM lost (124 us against the one-chunk packed 120.1), but one 8-warp program an SM with
# 3 rows in flight and the L2 prefetch was the fastest (119.8); the TMA-staged packed forward tied the default at
# 128256 and won at 262144 with 8192-column chunks, 4 warps, 4 programs an SM (285.6 us against 304.0); the fill
# helped only the 262144 backward (405.9 against 439.6). Here: one-program rows variants (8 warps with 16-byte
# vectors, or 16 warps with 8-byte vectors: both tile 14336 exactly; depth 1-4, prefetch 1-2, hints, 128 programs)
# against the default, twice, interleaved; at 262144 TMA stages/shapes twice and the TMA
# forward with the filled backward (fwd+bwd); at 128256 TMA at 32 words a thread (2 warps x 8, or 4 x 4 on 32
# groups); 8192x4096 default and Liger (must not regress); copy floors. Then every softmax GPU test but coop.
set -u
export TRITON_CACHE_DIR=/tmp/s6_triton
START=$(date +%s)
left() { echo $(( 194 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3; do
  timeout 45 python3 kernels_softmax_wide.py --plan s6r2 --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 60 ] && timeout $(( T - 60 )) python3 kernels_softmax_wide.py --plan s6r2 --reps 50 \
  --out "$OUT/kernels_softmax_wide_s6r2.json" --budget-s $(( T - 80 )) 2>&1 | tee "$OUT/s6r2.txt" | tail -n 100
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 8 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py \
  tests/kernels/test_softmax.py -k "not coop" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
