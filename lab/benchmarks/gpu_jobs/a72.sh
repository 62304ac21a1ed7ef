# budget: 150
# Wide softmax, session 7 round 2. Round 1 (benchmarks/results/softmax/2026-11-30_h200_wide_1805.json): the re-read forward lost
# everywhere (the L2 is the binding unit: a second L2 read per element costs more than the registers it frees);
# the TMA forward at 6 programs an SM with one-word partials polled by one thread + 100 ns back-off reached
# 1066.9 / 1065.6 us at 8192x128256 (0.921 / 0.922), now TMA_DEFAULT (3 an SM at 262144). Here (plan a72): that
# default against the session-6 default, interleaved and repeated; back-off 0-1000 ns, 5-7 an SM, 22-23 groups,
# 2 / 4 stages, 8192-column chunks; 4096x128256, 1024x262144 (one-word exchange at 3 an SM); 8192x14336 and
# 8192x4096 defaults (unchanged paths, regression check). Then the GPU tests of the TMA defaults.
set -u
export TRITON_CACHE_DIR=/tmp/a7_triton
START=$(date +%s)
left() { echo $(( 145 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3 4 5 6 7; do
  timeout 60 python3 kernels_softmax_wide.py --plan a72 --warm $k/8 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 40 ] && timeout $(( T - 15 )) python3 kernels_softmax_wide.py --plan a72 --reps 40 \
  --out "$OUT/kernels_softmax_wide_a72.json" --budget-s $(( T - 45 )) 2>&1 | tee "$OUT/a72.txt" | tail -n 60
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py \
  tests/kernels/test_softmax_reread.py -k "tma or defaults_by_width or one_word" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
