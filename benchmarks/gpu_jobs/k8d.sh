# budget: 120
# Issue 6, decode (session 4, round 2). First the decode sweep at K = N = 4096 and 8192: the persistent
# whole-row GEMV (PERSIST) candidates, round 1's whole-row / RED_EACH GEMVs, staggered 16/64-row tiles,
# the default path (the staggered 16-row tile is now in the autotune list), cuBLAS mm/addmm. Then the
# read floor again (a second sample of every family, the GEMV diagnostics: x's cost, persistent whole-row
# GEMVs without the residual; the harness's own methods, kernel and graph_events, at 32 MiB).
set -u
export TRITON_CACHE_DIR=/tmp/k8d_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
timeout 58 python3 benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 50 --workers 14 \
  --compile-timeout-s 14 --reps 30 --graph-reps 15 --harness-kernel 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
timeout 55 python3 benchmarks/read_floor.py --out "$OUT/read_floor.json" --budget-s 48 --workers 14 \
  --compile-timeout-s 18 --reps 30 --harness-top 12 2>&1 | tee "$OUT/read_floor.txt"
echo "read_floor rc=${PIPESTATUS[0]}"
