# budget: 100
# Issue 6 (if another round runs): the whole table of record with the adopted default in one job:
# prefill and decode rows, cuBLAS matmul / matmul then add / solkit fused (autotuned) / cuBLAS addmm /
# torch.compile / solkit without the residual, harness 'auto' (graph_events under 100 us, CUDA events
# above), read L2 flush, 4 interleaved trials; decode rows also get the CUDA profiler's kernel span.
# Everything is compiled first in worker processes; an nvidia-smi clock/power log runs alongside.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
  > "$OUT/smi.csv" 2>/dev/null &
SMI=$!
python3 lab/benchmarks/gemm_oproj.py --precompile 14 --precompile-timeout-s 45 --with-plain --kernel-time \
  --reps 60 --trials 4 --budget-s 88 --compile-reserve-s 20 --out "$OUT/gemm_oproj_h200_round5.json" 2>&1 \
  | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
kill "$SMI" 2>/dev/null
