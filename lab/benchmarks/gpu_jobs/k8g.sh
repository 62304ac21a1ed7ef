# budget: 100
# Issue 6 prefill, round 3 of session 4 (helper k8g): the final table of record for the prefill rows with
# the committed defaults (autotune list; solkit.tune picks per key), interleaved with cuBLAS matmul,
# matmul-then-add, addmm and the same config without the residual; harness 'auto' (CUDA events per call
# for these), read L2 flush, 5 interleaved trials; then a short sustained-loop power check of the adopted
# default at the two unmet shapes.
set -u
export TRITON_CACHE_DIR=/tmp/k8g_triton_cache
echo "start $(date -u +%T)"
timeout 62 python3 lab/benchmarks/gemm_oproj.py --precompile 12 --precompile-timeout-s 30 --no-compile --no-decode \
  --with-plain --reps 60 --trials 5 --budget-s 58 --out "$OUT/gemm_oproj_h200_round5_prefill.json" 2>&1 \
  | grep -v -i warn | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]} $(date -u +%T)"
timeout 30 python3 lab/benchmarks/gemm_power.py --shapes 4096x4096x4096,8192x4096x4096 \
  --variants "cuBLAS mm,cuBLAS addmm,solkit fused,solkit no residual" --seconds 0.8 --warm-s 0.3 --budget-s 26 \
  --out "$OUT/gemm_power_h200_round3.json" 2>&1 | grep -v -i warn | tee "$OUT/power.txt"
echo "done $(date -u +%T)"
