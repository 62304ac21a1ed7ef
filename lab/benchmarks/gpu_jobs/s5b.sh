# budget: 150
# Wide softmax, round 2 (session 5): the packed path adopted as the wide-row default (forward: f16 exponentials
# kept; backward: the next row's load after pass 1; single-block backward 16 warps at 16384-wide blocks). Sweep
# around it at 8192x128256 (cache hints, prefetch distance, chunk shapes, skew 2, a never-wait diagnostic), the
# 8192x14336 forward (single-block with streaming stores and 16 warps, one-chunk persistent packed rows, Liger),
# 1024x262144 and 4096x128256, torch.compile (max-autotune) at 14336 and 128256. Every row checked against fp64.
# Phase 1: compile (Triton warm-ups in 6 processes, torch.compile alone on the GPU's compute); phase 2: the plan;
# phase 3: the softmax GPU tests of the adopted defaults (packed configs, bf16 shapes, > 2^31 elements, auto path).
set -u
export TRITON_CACHE_DIR=/tmp/s5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/s5_inductor TORCHINDUCTOR_COMPILE_THREADS=4
START=$(date +%s)
left() { echo $(( 146 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
timeout 55 python3 kernels_softmax_wide.py --plan round2 --warm-compile >"$OUT/compile.log" 2>&1 &
PIDS="$!"
for k in 0 1 2 3 4 5; do
  timeout 50 python3 kernels_softmax_wide.py --plan round2 --warm $k/6 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 2 "$OUT"/warm*.log "$OUT"/compile.log
T=$(left)
[ "$T" -gt 40 ] && timeout $(( T - 36 )) python3 kernels_softmax_wide.py --plan round2 --reps 25 \
  --out "$OUT/kernels_softmax_wide_round2.json" --budget-s $(( T - 44 )) 2>&1 | tee "$OUT/round2.txt" | tail -n 80
cd ..
T=$(left)
[ "$T" -gt 6 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py \
  -k "packed or bf16_gpu or beyond_int32 or wide_auto" >"$OUT/pytest_gpu.txt" 2>&1
tail -n 8 "$OUT/pytest_gpu.txt"
find /tmp/s5_inductor -type f -name "*.best_config" 2>/dev/null | head -n 6 | while read -r f; do cp "$f" "$OUT/"; done
date -u
