# budget: 100
# Issue 6, round 4 (the table of record): every prefill and decode shape with matmul alone, matmul
# then add, solkit fused, cuBLAS addmm, torch.compile (prefill) and solkit without the epilogue
# (prefill), autotune lists from the round-3 sweep. Harness 'auto' (graph_events under 100 us,
# events above), read L2 flush, interleaved trials; decode rows also get the CUDA profiler's kernel
# span (context). Everything is compiled first in worker processes. Then the GPU tests with what is left.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
python3 benchmarks/gemm_oproj.py --precompile 8 --precompile-timeout-s 40 --with-plain --kernel-time \
  --reps 60 --trials 4 --budget-s 85 --compile-reserve-s 20 \
  --out "$OUT/gemm_oproj_h200_round3.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
timeout 9 python3 -m pytest tests/kernels/test_gemm_decode.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
