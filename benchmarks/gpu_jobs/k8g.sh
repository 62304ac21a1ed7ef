# budget: 150
# Issue 6 prefill, round 2 of session 4 (helper k8g):
# 1. the round-7 candidate sweep (gemm_configs.yaml hopper.prefill.candidates: around PREFETCH_RES 9, the
#    round-6 winner now first in the autotune list; PREFETCH_RES 12) at the four prefill shapes, interleaved
#    with cuBLAS mm/addmm, candidate 0 also without the residual;
# 2. the power/clock diagnosis again (sustained loops, NVML), with the fused kernel also reading a
#    broadcast residual (row 0 for every row: L2-resident, no DRAM traffic for it): does the residual cost
#    cycles through its DRAM/L2 traffic or through the SM's epilogue work?
# 3. the GPU tests of test_gemm.py (bf16 autotuned paths with the new first entry, residual-loading modes).
set -u
export TRITON_CACHE_DIR=/tmp/k8g_triton_cache
echo "start $(date -u +%T)"
timeout 52 python3 benchmarks/gemm_oproj.py --sweep only --sweep-prefill all --sweep-decode none --sweep-plain 0 \
  --precompile 14 --precompile-timeout-s 35 --reps 40 --sweep-trials 4 --no-compile --budget-s 47 \
  --out "$OUT/gemm_oproj_h200_round5_sweep2.json" 2>&1 | grep -v -i warn | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]} $(date -u +%T)"
M6='{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16, "EPI_SUBTILE": 2, "FLATTEN": true, "PREFETCH_RES": 6, "PF_DIST": 8, "Y_EVICT_FIRST": true, "num_warps": 8, "num_stages": 4}'
timeout 55 python3 benchmarks/gemm_power.py --shapes 4096x4096x4096,8192x4096x4096,16384x4096x4096 \
  --variants "cuBLAS mm,cuBLAS addmm,solkit fused,solkit no residual,solkit fused (broadcast residual)" \
  --extra "solkit mode6=$M6" --bcast-extras --seconds 0.8 --warm-s 0.3 --sample-ms 5 --budget-s 50 \
  --out "$OUT/gemm_power_h200_round2.json" 2>&1 | grep -v -i warn | tee "$OUT/power.txt"
echo "power rc=${PIPESTATUS[0]} $(date -u +%T)"
timeout 36 python3 -m pytest -q -p no:cacheprovider -k "late or preloaded or y_evict or bf16" tests/kernels/test_gemm.py \
  2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
echo "done $(date -u +%T)"
