# budget: 150
# Wide softmax, round 1 (session 5): the packed one-read kernels (src/solkit/kernels/softmax/packed.py) swept at
# 8192x128256 bf16 (forward, backward alone, forward+backward; chunk width, warps, programs per SM, kept values,
# early load, L2 prefetch distance, fallback compiled in, a never-wait diagnostic), then 8192x14336 (solkit default,
# packed, Liger, torch.compile max-autotune, eager), 4096x128256 and 1024x262144. Every row checked against fp64.
# Phase 1 (parallel): torch.compile autotuned alone on the GPU's compute (the Triton warm-ups only compile and
# launch tiny grids); phase 2: the timed plan alone; phase 3: the packed path's GPU tests in the time left.
set -u
export TRITON_CACHE_DIR=/tmp/s5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/s5_inductor TORCHINDUCTOR_COMPILE_THREADS=4
START=$(date +%s)
left() { echo $(( 146 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
timeout 50 python3 kernels_softmax_wide.py --warm-compile >"$OUT/compile.log" 2>&1 &
PIDS="$!"
for k in 0 1 2 3 4 5; do
  timeout 46 python3 kernels_softmax_wide.py --warm $k/6 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log "$OUT"/compile.log
T=$(left)
[ "$T" -gt 20 ] && timeout $(( T - 22 )) python3 kernels_softmax_wide.py --plan round1 --reps 30 --out "$OUT/kernels_softmax_wide_round1.json" \
  --budget-s $(( T - 30 )) 2>&1 | tee "$OUT/round1.txt" | tail -n 70
cd ..
T=$(left)
[ "$T" -gt 6 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -x tests/kernels/test_softmax.py -k "packed" \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 5 "$OUT/pytest_gpu.txt"
find /tmp/s5_inductor -type f -name "*.best_config" 2>/dev/null | head -n 4 | while read -r f; do cp "$f" "$OUT/"; done
date -u
