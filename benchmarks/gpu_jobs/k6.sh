# budget: 150
# Issue 6: fused-epilogue Triton GEMM (o_proj + residual): config sweep, the seed's table, then the
# GPU tests with the time left. Results land in $OUT; the JSON is rewritten after every shape, so a
# kill at the budget keeps what was measured. Fresh Triton/inductor caches: compile times are real.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 benchmarks/gemm_oproj.py --sweep --with-plain --budget-s 120 \
  --out "$OUT/gemm_oproj_run.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
timeout 25 python3 -m pytest tests/kernels/test_gemm.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 30 | tee "$OUT/pytest_gpu.txt"
