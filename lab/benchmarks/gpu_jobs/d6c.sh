# budget: 150
# Issue 6, decode at K = N = 4096 (session 6, round 3): the account of record, in one job. Per M in {1, 16, 64}:
# gemm()'s default path (unchanged: no Gluon rule), cuBLAS mm / addmm, every Triton decode config of the row class,
# the default config without the residual, the Gluon swap-AB kernel's two fastest structures taken apart (NO_MATH 2:
# bare TMA ring; 3: + x and wgmma; 1: + split reduction and epilogue, no math; 0: all) and with a producer warp;
# at M = 1 the bare floors of the Triton structures over the same 32 MiB W. Rows checked first; kernel span
# interleaved in one profiler session; baselines and best Gluon rows via timing.benchmark("kernel"). Then the GPU
# tests of both decode test files.
set -u
export TRITON_CACHE_DIR=/tmp/d6_triton
START=$(date +%s)
left() { echo $(( 144 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 85 python3 lab/benchmarks/gemm_decode_gluon.py --out "$OUT/gemm_decode_gluon_r3.json" --budget-s 78 \
  --reps 60 --workers 14 --compile-timeout-s 40 --plan r3 --default-path 2>&1 | tee "$OUT/r3.txt" | tail -n 120
echo "bench rc=${PIPESTATUS[0]} at $(( $(date +%s) - START ))s"
T=$(left)
[ "$T" -gt 15 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm_decode_gluon.py \
  tests/kernels/test_gemm_decode.py >"$OUT/pytest_gpu.txt" 2>&1
tail -n 25 "$OUT/pytest_gpu.txt"
date -u
