# budget: 200
# Wide softmax, session 6 round 1: the exact-tile whole-row forward (solkit.kernels.softmax.rows: 14336 columns
# as (4 + 2 + 1) x 1024 int32 words at 8 warps, no masked lanes; 2 programs per SM, rows in flight 1-3, L2
# prefetch, cache hints) against the default one-chunk packed forward at 8192x14336, and at 8192x4096 against the
# single-block default; at the vocabulary widths the TMA-staged packed forward (solkit.kernels.softmax.tma:
# chunks pipelined through shared memory, 2-5 in flight) and the packed path with its chunk count chosen to fill
# every resident slot (fill=1: 33 chunks x 16 groups at 128256, not 32 x 16), forward and backward; the bare copy
# (y.copy_(x)) at every shape: the floor. Every solkit row checked against fp64 over every row first. Then every
# softmax GPU test but the opt-in cooperative path's (the packed polls now use kernels/_spin, the cooperative
# path moved to softmax_coop.py) and the new ones (rows, TMA, fill), with the time left.
set -u
export TRITON_CACHE_DIR=/tmp/s6_triton
START=$(date +%s)
left() { echo $(( 194 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3; do
  timeout 45 python3 kernels_softmax_wide.py --plan s6r1 --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 60 ] && timeout $(( T - 60 )) python3 kernels_softmax_wide.py --plan s6r1 --reps 30 \
  --out "$OUT/kernels_softmax_wide_s6r1.json" --budget-s $(( T - 80 )) 2>&1 | tee "$OUT/s6r1.txt" | tail -n 100
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 8 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py \
  tests/kernels/test_softmax.py -k "not coop" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
