# budget: 60
# Issue 6, round 3 of this session (small): the prefill rows of the table of record again with the
# adopted default (gemm_configs.yaml hopper.prefill.autotune, first entry new after the round-2 sweep:
# y and the residual evict_first in L2, 4 stages, GROUP_M 16): cuBLAS matmul, matmul then add, solkit
# fused (autotuned), cuBLAS addmm and solkit without the residual, interleaved, 5 trials; harness 'auto'
# (CUDA events per call above 100 us), read L2 flush. torch.compile and the decode rows are in the round-2
# table (benchmarks/results/gemm_oproj_h200_round4.json). An nvidia-smi clock/power log runs alongside.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
  > "$OUT/smi.csv" 2>/dev/null &
SMI=$!
python3 benchmarks/gemm_oproj.py --precompile 8 --precompile-timeout-s 30 --no-compile --no-decode --with-plain \
  --reps 60 --trials 5 --budget-s 48 --out "$OUT/gemm_oproj_h200_round4_prefill.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
kill "$SMI" 2>/dev/null
