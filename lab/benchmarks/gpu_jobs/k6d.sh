# budget: 45
# Issue 6, decode criterion, confirmation (if a later round has room): gemm's default path with the
# final hopper.decode autotune list at M in {1, 16, 64}, K = N in {4096, 8192}, bf16, against cuBLAS mm
# and addmm, beside the STAGGER candidates and their unstaggered twins (the third pass, gemm_decode_
# h200_round4_r3.json, timed only the staggered ones: a label clash), each row class's first entry
# without the residual, and the bare weight stream. Correctness first, then the kernel span (the
# harness's median; baselines also through timing.benchmark(method="kernel")) and graph_events.
set -u
export TRITON_CACHE_DIR=/tmp/k6d_triton_cache
python3 lab/benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 36 --workers 14 \
  --compile-timeout-s 15 --reps 40 --graph-reps 30 --diag --harness-kernel 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
