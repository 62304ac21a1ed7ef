# budget: 150
# Issue 6: fused-epilogue Triton GEMM (o_proj + residual): config sweep, the seed's table, then the
# GPU tests with the time left. Results land in $OUT; the JSON is rewritten after every shape, so a
# kill at the budget keeps what was measured. The Triton cache (compiled kernels + autotune
# timings, inductor's cache) is saved as $OUT/k6_cache.tgz and reused when benchmarks/gpu_jobs/k6_cache.tgz exists.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
mkdir -p "$TRITON_CACHE_DIR" "$TORCHINDUCTOR_CACHE_DIR"
[ -f benchmarks/gpu_jobs/k6_cache.tgz ] && tar -xzf benchmarks/gpu_jobs/k6_cache.tgz -C /tmp && echo "compile caches restored"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 benchmarks/gemm_oproj.py --sweep --with-plain --reps 30 --budget-s 105 \
  --out "$OUT/gemm_oproj_round1.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
tar -czf "$OUT/k6_cache.tgz" -C /tmp k6_triton_cache k6_inductor_cache && ls -la "$OUT/k6_cache.tgz"
timeout 35 python3 -m pytest tests/kernels/test_gemm.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 30 | tee "$OUT/pytest_gpu.txt"
