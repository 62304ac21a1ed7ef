# budget: 60
# Issue 6, decode (session 4, round 3: the table of record). gemm's default path with the final
# hopper.decode autotune list (persistent whole-row GEMV and whole-row RED_EACH GEMV for 1 row, the
# staggered 16-row tile) at M in {1, 16, 64}, K = N in {4096, 8192}, bf16, beside the autotune entries and
# cuBLAS mm/addmm: correctness first, then the kernel span (the harness's median; baselines and the
# default path also through timing.benchmark(method="kernel")) and graph_events. Then the decode GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/k8d_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
timeout 38 python3 lab/benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 33 --workers 14 \
  --compile-timeout-s 12 --reps 40 --graph-reps 20 --only autotune --harness-kernel 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
timeout 17 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_gemm_decode.py -k bf16 \
  2>&1 | tail -n 15 | tee "$OUT/gpu_tests.txt"
echo "tests rc=${PIPESTATUS[0]}"
