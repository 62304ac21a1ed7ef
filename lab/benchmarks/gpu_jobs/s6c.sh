# budget: 130
# Wide softmax, session 6 round 3: the table of record of the final defaults (plan s6rec of
# lab/benchmarks/kernels_softmax_wide.py): at 8192x14336, 8192x4096, 8192x128256, 1024x262144 and 4096x128256 the
# module defaults (forward, backward alone, forward + backward), the previous defaults, Liger-Kernel and
# torch.compile (max-autotune, compiled in a warm-up process first, alone with the Triton warm-up) where they run,
# eager, and the bare copy; every row checked against fp64 over every row. Then the GPU tests of the new defaults
# (rows at 14336, TMA at 128256 and 262144, the filled 262144 backward) at Llama shapes, > 2^31 elements included.
set -u
export TRITON_CACHE_DIR=/tmp/s6_triton
START=$(date +%s)
left() { echo $(( 126 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
timeout 45 python3 kernels_softmax_wide.py --plan s6rec --warm-compile >"$OUT/warm_compile.log" 2>&1 &
PIDS="$PIDS $!"
for k in 0 1 2; do
  timeout 30 python3 kernels_softmax_wide.py --plan s6rec --warm $k/3 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 40 ] && timeout $(( T - 30 )) python3 kernels_softmax_wide.py --plan s6rec --reps 40 \
  --out "$OUT/kernels_softmax_wide_s6rec.json" --budget-s $(( T - 45 )) 2>&1 | tee "$OUT/s6rec.txt" | tail -n 60
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 8 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_rows.py \
  tests/kernels/test_softmax.py -k "defaults_by_width or declines or fill_bf16 or softmax_bf16_gpu or wide_auto \
  or packed_launches or beyond_int32" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 12 "$OUT/pytest_gpu.txt"
date -u
