# budget: 62
# Issue 6, decode criterion, round 2 of the decode sweep: the hopper.decode autotune list adopted from
# round 1 (benchmarks/results/gemm_decode_h200_round4.json) through gemm's default path (its own config
# choice) and explicitly, the second-pass candidates (residual L2 prefetch PRE_RES 2, 4-row GEMV tiles,
# 64-program tiles), cuBLAS mm and addmm; bf16, M in {1, 16, 64}, K = N in {4096, 8192}. Correctness
# first (two random input sets, NaN-poisoned outputs, fp32 reference), then the CUDA-profiler kernel span
# (the harness's median; baselines and the default path also through timing.benchmark(method="kernel"))
# and graph_events, read L2 flush. Then the fixed cost of a short stream (GEMV over N, copy over size).
# Then the GPU tests of the decode kernel (TMA paths, graph replay).
set -u
export TRITON_CACHE_DIR=/tmp/k6d_triton_cache
python3 benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 36 --workers 14 \
  --compile-timeout-s 20 --reps 30 --graph-reps 30 --harness-kernel --scan 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
timeout 17 python3 -m pytest tests/kernels/test_gemm_decode.py -q -m gpu -p no:cacheprovider 2>&1 | tail -n 8
