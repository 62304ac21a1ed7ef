# budget: 120
# Issue 6, round 2 of this session: (1) a short sweep at the two unmet shapes (4096^3, 8192x4096^2): the
# persistent kernel's residual-epilogue variants of gemm_configs.yaml hopper.prefill.candidates (the
# residual loads and y stores evict_first in L2, other tile orders, 4 stages; candidates 0 (the current
# default) and 8 (evict_first everywhere, 4 stages) also without the residual), interleaved with cuBLAS
# matmul/addmm; (2) the table of record with the default path (autotune), prefill and decode, harness 'auto' (graph_events under 100 us, CUDA events above),
# read L2 flush, interleaved trials; decode rows also get the CUDA profiler's kernel span. Everything
# is compiled first in worker processes. An nvidia-smi log (SM clock, power, 100 ms) runs alongside:
# each trial records its wall-clock span, so the clocks each variant ran at can be read off.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
  > "$OUT/smi.csv" 2>/dev/null &
SMI=$!
python3 benchmarks/gemm_oproj.py --precompile 14 --precompile-timeout-s 45 --sweep first --sweep-prefill unmet \
  --sweep-decode none --sweep-plain 0,8 --sweep-trials 4 --with-plain --kernel-time --reps 60 --trials 4 \
  --budget-s 105 --compile-reserve-s 20 --out "$OUT/gemm_oproj_h200_round4.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
kill "$SMI" 2>/dev/null
