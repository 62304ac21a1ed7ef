# budget: 90
# Wide softmax, round 3 (session 5): the table of record of the adopted defaults (packed forward/backward over
# 16384 wide; one-chunk packed forward and streaming-store single-block backward at 14336) at 8192x14336,
# 8192x128256, 1024x262144, 4096x128256 and 8192x4096, the previous wide-row defaults, Liger, torch.compile
# (max-autotune, compiled alone first) and eager at 14336; every row checked against fp64. Then the GPU tests of
# the defaults not yet run on this tree (bf16 shapes, > 2^31 elements, auto path, one-chunk packed configs).
set -u
export TRITON_CACHE_DIR=/tmp/s5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/s5_inductor TORCHINDUCTOR_COMPILE_THREADS=4
START=$(date +%s)
left() { echo $(( 87 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
timeout 36 python3 kernels_softmax_wide.py --plan record --warm-compile >"$OUT/compile.log" 2>&1 &
PIDS="$!"
for k in 0 1 2; do
  timeout 30 python3 kernels_softmax_wide.py --plan record --warm $k/3 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log "$OUT"/compile.log
T=$(left)
[ "$T" -gt 20 ] && timeout $(( T - 14 )) python3 kernels_softmax_wide.py --plan record --reps 30 \
  --out "$OUT/kernels_softmax_wide_record.json" --budget-s $(( T - 20 )) 2>&1 | tee "$OUT/record.txt" | tail -n 40
cd ..
T=$(left)
[ "$T" -gt 5 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py \
  -k "(bf16_gpu and not coop) or wide_auto or launches or packed_gpu_sp1 or beyond_int32" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 6 "$OUT/pytest_gpu.txt"
date -u
