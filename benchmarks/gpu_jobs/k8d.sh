# budget: 120
# Issue 6, decode at K = N = 4096 (session 4, round 1). First the read floor (benchmarks/read_floor.py): the
# shortest kernel span in which any kernel family on this H200 reads 1-512 MiB once (L2 read-flushed
# before every call), fitted T = a + bytes / B per family; then the decode sweep at K = N = 4096 with the
# new hopper.decode candidates (1-row GEMVs over whole rows, RED_EACH GEMVs: each W block reduced at
# once, about half the registers; 16-column tensor-core tiles) beside the current list, cuBLAS mm/addmm
# and the default path.
set -u
export TRITON_CACHE_DIR=/tmp/k8d_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
timeout 72 python3 benchmarks/read_floor.py --out "$OUT/read_floor.json" --budget-s 62 --workers 14 \
  --compile-timeout-s 20 --reps 30 2>&1 | tee "$OUT/read_floor.txt"
echo "read_floor rc=${PIPESTATUS[0]}"
timeout 42 python3 benchmarks/gemm_decode_sweep.py --out "$OUT/gemm_decode_sweep.json" --budget-s 36 --workers 14 \
  --compile-timeout-s 14 --reps 40 --graph-reps 20 --k 4096 --harness-kernel 2>&1 | tee "$OUT/sweep.txt"
echo "sweep rc=${PIPESTATUS[0]}"
