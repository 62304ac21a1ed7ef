# budget: 150
# Session 5, round 1 (helper: norm backwards + issue-7 record).
#  1. Background (CPU mostly, ~45 s): 4 processes compile the norm-backward sweep's variants into Triton's cache;
#     the bf16 GPU tests of both norm files; 2 processes fill Inductor's caches for a trial of the record script.
#  2. Alone on the GPU: the norm backward sweep (lab/benchmarks/kernels_normbwd.py): RMSNorm / add+RMSNorm /
#     LayerNorm backward variants at 8192x4096 bf16 (balanced grid, dW reduction fused after a grid barrier,
#     weight re-read per block, deeper register rings, 1 program x 32 warps x 2 rows, two-pass blocks re-read from L1), each checked against
#     float64 and timed alone and after the default forward.
#  3. Alone: a trial of lab/benchmarks/kernels_record.py on four rows (Inductor's .best_config dropped, so compile
#     autotunes here, on a quiet GPU): compile times, the protocol, the JSON.
set -u
export TRITON_CACHE_DIR=/tmp/r5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/r5_inductor
START=$(date +%s)
left() { echo $(( 143 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
REC_OPS="rmsnorm:fwd+bwd,rope:fwd,cross_entropy"
timeout 40 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py >"$OUT/pytest_gpu.txt" 2>&1 &
PIDS="$!"
cd benchmarks
for k in 0 1 2 3; do
  timeout 42 python3 kernels_normbwd.py --ops rmsnorm,layernorm,add_rmsnorm --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
for k in 0 1; do
  timeout 42 python3 kernels_record.py --ops "$REC_OPS" --warm-compile $k/2 >"$OUT/warm_compile$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm + tests done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log; tail -n 4 "$OUT/pytest_gpu.txt"
timeout 60 python3 kernels_normbwd.py --ops rmsnorm,layernorm,add_rmsnorm --out "$OUT/kernels_normbwd_h200_r1.json" \
  --budget-s 54 2>&1 | tee "$OUT/normbwd.txt" | grep -vE "^ +(copy|mul1)_events" | tail -n 80
T=$(left)
echo "record trial: ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 kernels_record.py --ops "$REC_OPS" --drop-autotune-cache \
  --out "$OUT/kernels_record_h200_r1.json" --budget-s $(( T - 6 )) --compile-budget-s $(( T / 2 )) 2>&1 | tee "$OUT/record.txt" | tail -n 40
date -u
