# budget: 170
# Wide softmax, session 7 round 3: the table of record of the final defaults (plan a7rec of
# lab/benchmarks/softmax_wide_plans.py): at 8192x14336, 8192x4096, 8192x128256, 1024x262144 and 4096x128256 the module
# defaults (forward, backward alone, forward + backward), the session-6 defaults of the TMA forward beside them,
# Liger-Kernel and torch.compile (max-autotune, compiled in a warm-up process first) where they run, eager, the bare
# copy; every row checked against fp64 over every row. Then the GPU tests of the softmax defaults.
set -u
export TRITON_CACHE_DIR=/tmp/a7_triton
START=$(date +%s)
left() { echo $(( 165 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
timeout 50 python3 kernels_softmax_wide.py --plan a7rec --warm-compile >"$OUT/warm_compile.log" 2>&1 &
PIDS="$PIDS $!"
for k in 0 1 2 3; do
  timeout 40 python3 kernels_softmax_wide.py --plan a7rec --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 40 ] && timeout $(( T - 45 )) python3 kernels_softmax_wide.py --plan a7rec --reps 40 \
  --out "$OUT/kernels_softmax_wide_a7rec.json" --budget-s $(( T - 60 )) 2>&1 | tee "$OUT/a7rec.txt" | tail -n 60
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 8 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py \
  tests/kernels/test_softmax.py tests/kernels/test_softmax_reread.py -k "defaults_by_width or declines or fill_bf16 \
  or softmax_bf16_gpu or wide_auto or beyond_int32 or one_word" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
