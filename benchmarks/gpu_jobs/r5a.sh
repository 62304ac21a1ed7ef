# budget: 150
# Session 5, round 1 (helper: norm backwards + issue-7 record). The norm backward sweep
# (benchmarks/kernels_normbwd.py): RMSNorm / add+RMSNorm / LayerNorm backward variants at 8192x4096 and
# 8192x8192 bf16 (balanced grid, dW reduction fused after a grid barrier, weight re-read per block, deeper
# register rings, 1 program x 32 warps x 2 rows), each checked against float64 and timed alone and after the
# default forward. First (background, CPU mostly): 4 processes compile the variants into Triton's cache, and
# the bf16 GPU tests of both norm files run (the fused reduction is not the default yet).
set -u
export TRITON_CACHE_DIR=/tmp/r5_triton
START=$(date +%s)
left() { echo $(( 142 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 40 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py >"$OUT/pytest_gpu.txt" 2>&1 &
PIDS="$!"
cd benchmarks
for k in 0 1 2 3; do
  timeout 45 python3 kernels_normbwd.py --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm + tests done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log; tail -n 4 "$OUT/pytest_gpu.txt"
T=$(left)
[ "$T" -gt 10 ] && timeout "$T" python3 kernels_normbwd.py --out "$OUT/kernels_normbwd_h200_r1.json" \
  --budget-s $(( T - 8 )) 2>&1 | tee "$OUT/normbwd.txt" | grep -vE "^ +(copy|mul1)_events" | tail -n 120
date -u
