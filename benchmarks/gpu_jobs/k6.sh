# budget: 140
# Issue 6, prefill (round 4 of the session's rounds, job 1): the stream-K kernel (gemm_streamk.py) against
# the persistent kernel's two best configs, at the four prefill shapes, every candidate of
# gemm_configs.yaml hopper.prefill interleaved with cuBLAS matmul and addmm in the same trials (the card
# is power-capped). Candidates 0 (persistent, the current default), 3 and 4 (stream-K, 1 and 2 waves)
# and 14 (stream-K, 128x128 tiles, two programs per SM) are also timed without the residual (the
# epilogue's cost). Harness 'auto' (CUDA events per call above 100 us), read L2 flush. Everything is
# compiled first in worker processes. Then the stream-K GPU tests (odd M, CUDA-graph replay) on the same
# Triton cache.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 benchmarks/gemm_oproj.py --precompile 14 --precompile-timeout-s 50 --sweep only --sweep-prefill all \
  --sweep-decode none --sweep-plain 0,3,4,14 --reps 60 --sweep-trials 5 --budget-s 100 \
  --out "$OUT/gemm_oproj_h200_round4_sweep.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
timeout 25 python3 -m pytest tests/kernels/test_gemm_streamk.py -q -x -m gpu -p no:cacheprovider 2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
