# budget: 150
# Issue 6 prefill, round 1 of session 4 (helper k8g):
# 1. the round-6 candidate sweep (gemm_configs.yaml hopper.prefill.candidates: the residual loaded into
#    registers a few k-steps before the epilogue, PREFETCH_RES 8/9, earlier L2 prefetch) at the four
#    prefill shapes, interleaved with cuBLAS mm/addmm, candidates 0 and 1 also without the residual;
#    its --precompile also compiles every config the power diagnosis needs (same Triton cache);
# 2. the power/clock diagnosis (benchmarks/gemm_power.py): each variant as a sustained loop, NVML sampled.
set -u
export TRITON_CACHE_DIR=/tmp/k8g_triton_cache
echo "start $(date -u +%T)"
timeout 75 python3 benchmarks/gemm_oproj.py --sweep only --sweep-prefill all --sweep-decode none --sweep-plain 0,1 \
  --precompile 14 --precompile-timeout-s 40 --reps 40 --sweep-trials 4 --no-compile --budget-s 70 \
  --out "$OUT/gemm_oproj_h200_round5_sweep.json" 2>&1 | grep -v -i warn | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]} $(date -u +%T)"
timeout 65 python3 benchmarks/gemm_power.py --seconds 0.8 --warm-s 0.3 --sample-ms 5 --budget-s 58 \
  --out "$OUT/gemm_power_h200_round1.json" 2>&1 | grep -v -i warn | tee "$OUT/power.txt"
echo "power rc=${PIPESTATUS[0]} $(date -u +%T)"
