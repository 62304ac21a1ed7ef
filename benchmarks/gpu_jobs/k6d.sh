# budget: 80
# Issue 6, decode criterion (round 1 of this sweep): every hopper.decode candidate and autotune entry
# of gemm_configs.yaml (splitk kernel: pointer loads vs TMA descriptors with deep stages, residual
# preload, evict_first, one-wave grids) at M in {1, 16, 64}, K = N in {4096, 8192}, bf16, against
# cuBLAS mm and addmm. Correctness on two random input sets with NaN-poisoned outputs first, then the
# CUDA-profiler kernel span per call (the harness's median) and graph_events, read L2 flush.
set -u
export TRITON_CACHE_DIR=/tmp/k6d_triton_cache
python3 benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 58 --workers 12 \
  --compile-timeout-s 30 --reps 30 --graph-reps 30 --no-default-path 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
timeout 9 python3 -m pytest tests/kernels/test_gemm_decode.py -q -m gpu -k "not tma" -p no:cacheprovider 2>&1 | tail -n 6
