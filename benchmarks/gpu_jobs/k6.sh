# budget: 100
# Issue 6: fused-epilogue Triton GEMM (o_proj + residual). The seed's table first (prefill, decode,
# torch.compile), then the config sweep and the GPU tests with the time left. The JSON is rewritten
# after every shape, so a kill at the cap keeps what was measured.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
python3 benchmarks/gemm_oproj.py --with-plain --sweep last --sweep-scope seed --reps 10 --trials 4 --sweep-trials 2 --budget-s 75 \
  --out "$OUT/gemm_oproj_h200.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
timeout 15 python3 -m pytest tests/kernels/test_gemm.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 20 | tee "$OUT/pytest_gpu.txt"
