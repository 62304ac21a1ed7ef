# budget: 150
# Issue 6 prefill, round 1 of session 4 (helper k8g):
# 1. the round-6 candidate sweep (gemm_configs.yaml hopper.prefill.candidates: the residual loaded into
#    registers a few k-steps before the epilogue, PREFETCH_RES 8/9/10, earlier L2 prefetch) at the four
#    prefill shapes, interleaved with cuBLAS mm/addmm, candidates 0 and 1 (the autotune picks of the table
#    of record) also without the residual; its --precompile also compiles every config the power
#    diagnosis needs (same Triton cache);
# 2. the power/clock diagnosis (benchmarks/gemm_power.py): each variant as a sustained loop, NVML sampled,
#    plus two of the new candidates as extra variants;
# 3. the residual-loading mode tests of test_gemm.py on the GPU (fp16, ragged shapes, NaN-poisoned output).
set -u
export TRITON_CACHE_DIR=/tmp/k8g_triton_cache
echo "start $(date -u +%T)"
timeout 55 python3 benchmarks/gemm_oproj.py --sweep only --sweep-prefill all --sweep-decode none --sweep-plain 0,1 \
  --precompile 14 --precompile-timeout-s 35 --reps 40 --sweep-trials 4 --no-compile --budget-s 50 \
  --out "$OUT/gemm_oproj_h200_round5_sweep.json" 2>&1 | grep -v -i warn | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]} $(date -u +%T)"
M8='{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "EPI_SUBTILE": 2, "FLATTEN": true, "PREFETCH_RES": 8, "PF_DIST": 16, "LD_DIST": 4, "Y_EVICT_FIRST": true, "num_warps": 8, "num_stages": 4}'
M10='{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "EPI_SUBTILE": 2, "FLATTEN": true, "PREFETCH_RES": 10, "PF_DIST": 16, "LD_DIST": 4, "Y_EVICT_FIRST": true, "num_warps": 8, "num_stages": 4}'
timeout 68 python3 benchmarks/gemm_power.py --seconds 0.9 --warm-s 0.35 --sample-ms 5 --budget-s 62 \
  --extra "solkit mode8=$M8" --extra "solkit mode10=$M10" \
  --out "$OUT/gemm_power_h200_round1.json" 2>&1 | grep -v -i warn | tee "$OUT/power.txt"
echo "power rc=${PIPESTATUS[0]} $(date -u +%T)"
timeout 22 python3 -m pytest -q -p no:cacheprovider -k "late or preloaded or y_evict" tests/kernels/test_gemm.py \
  2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
echo "done $(date -u +%T)"
