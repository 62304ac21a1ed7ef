# budget: 240
# Issue 6, decode at K = N = 4096 (session 6, round 2): where the time goes, in one job. Per M in {1, 16, 64}:
# every Triton decode config of the row class (the fastest kernel of each Triton structure: whole-row / persistent
# GEMVs at M = 1, TMA tensor-core tiles at 16 / 64), the default config without the residual, gemm()'s default path,
# cuBLAS mm / addmm, and the Gluon swap-AB kernel's best round-1 structures taken apart (NO_MATH 2: bare TMA ring;
# 3: + x and wgmma, no split reduction; 1: + reduction and epilogue, no math; 0: all) plus tile-aligned 2-per-SM
# grids. At M = 1 (same 32 MiB W) the bare floors of the Triton structures (_read_kernels.py: pointer chunks, GEMV
# with / without x, persistent GEMV, TMA tiles, cp.async pipe, empty launch). All GEMM rows checked first; kernel
# span interleaved in one profiler session; baselines and best Gluon rows via timing.benchmark("kernel").
set -u
export TRITON_CACHE_DIR=/tmp/d6_triton
START=$(date +%s)
left() { echo $(( 234 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 200 python3 lab/benchmarks/gemm_decode_gluon.py --out "$OUT/gemm_decode_gluon_r2.json" --budget-s 190 \
  --reps 60 --workers 14 --compile-timeout-s 60 --plan r2 --default-path 2>&1 | tee "$OUT/r2.txt" | tail -n 170
echo "bench rc=${PIPESTATUS[0]} at $(( $(date +%s) - START ))s"
T=$(left)
[ "$T" -gt 15 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm_decode_gluon.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 25 "$OUT/pytest_gpu.txt"
date -u
