# budget: 240
# Issue 6, decode at K = N = 4096 (session 6, round 1): the swap-AB Gluon decode kernel (gemm_decode_gluon.py:
# W tiles as the wgmma's A operand, x^T as B with N = M padded to 8/16/64, a TMA + mbarrier ring of W units,
# a stream-K split with a last-arriver reduction and the residual fused) in ~16 shapes of tile / ring / grid,
# beside the bare read floors of the same ring (NO_MATH 2: W only; 1: ring + reductions + epilogue, no math),
# Triton's fastest 32 MiB reader, the round-5 Triton decode configs and cuBLAS mm / addmm, at M = 1, 16, 64.
# Every GEMM row checked first (NaN-poisoned output, fp32 reference); kernel span interleaved in one profiler
# session (the harness's median), baselines and the two fastest Gluon rows also via timing.benchmark("kernel").
# Then the new file's GPU tests with the time left.
set -u
export TRITON_CACHE_DIR=/tmp/d6_triton
START=$(date +%s)
left() { echo $(( 234 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 190 python3 lab/benchmarks/gemm_decode_gluon.py --out "$OUT/gemm_decode_gluon_r1.json" --budget-s 180 \
  --reps 40 --workers 14 --compile-timeout-s 70 --plan r1 2>&1 | tee "$OUT/r1.txt" | tail -n 160
echo "bench rc=${PIPESTATUS[0]} at $(( $(date +%s) - START ))s"
T=$(left)
[ "$T" -gt 15 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm_decode_gluon.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 25 "$OUT/pytest_gpu.txt"
date -u
