# budget: 150
# Wide softmax, round 4 (session 5): the defaults re-timed after round 3 (the wide forward now keeps bf16
# exponentials for bf16 inputs) at 8192x14336, 8192x128256, 1024x262144 and 4096x128256, with A/B rows (the
# round-3 forward, repeated default rows); 8192x4096 (0.890 forward in round 3 under this protocol) against
# single-block stores with .cs, 1-D rows, 2-row blocks and the one-chunk packed forward (no exchange), and Liger;
# 14336 one-chunk forward variants (depth 3, no L2 prefetch, late load). Every row checked against fp64. Then every
# softmax GPU test but the opt-in cooperative path's, on this tree.
set -u
export TRITON_CACHE_DIR=/tmp/s5_triton
START=$(date +%s)
left() { echo $(( 146 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3; do
  timeout 30 python3 kernels_softmax_wide.py --plan round4 --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 60 ] && timeout 60 python3 kernels_softmax_wide.py --plan round4 --reps 30 \
  --out "$OUT/kernels_softmax_wide_round4.json" --budget-s 52 2>&1 | tee "$OUT/round4.txt" | tail -n 50
cd ..
T=$(left)
[ "$T" -gt 5 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py \
  -k "not coop" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 8 "$OUT/pytest_gpu.txt"
date -u
