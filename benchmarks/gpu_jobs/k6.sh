# budget: 150
# Issue 6: fused-epilogue Triton GEMM (o_proj + residual). Round 1: config sweep + the table, then
# the GPU tests with whatever time is left. Everything lands in $OUT; the JSON is rewritten after
# every shape, so a kill at the budget keeps what was measured.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 benchmarks/gemm_oproj.py --sweep --no-compile --reps 30 --budget-s 95 \
  --out "$OUT/gemm_oproj_round1.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
timeout 40 python3 -m pytest tests/kernels/test_gemm.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 30 | tee "$OUT/pytest_gpu.txt"
du -sh "$TRITON_CACHE_DIR" 2>/dev/null || true
