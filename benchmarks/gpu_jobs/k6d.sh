# budget: 40
# Issue 6, decode criterion, third pass (optional; K = N = 4096 only, where 0.85 is not met): STAGGER 1
# (each program starts its K walk at block pid_n and wraps around) on the winners of the first two
# passes, beside them; gemm's default path with the autotune list as updated from the second pass
# (benchmarks/results/gemm_decode_h200_round4_r2.json); each row class's first autotune entry without
# the residual (what the residual costs); cuBLAS mm and addmm. Correctness first, then the kernel span
# (the harness's median; baselines also through timing.benchmark(method="kernel")) and graph_events.
set -u
export TRITON_CACHE_DIR=/tmp/k6d_triton_cache
python3 benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 30 --workers 14 \
  --compile-timeout-s 15 --reps 40 --graph-reps 30 --k 4096 --diag --harness-kernel 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
