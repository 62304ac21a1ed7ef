# budget: 220
# Session 5, round 3: issue 7's consolidated table of record at the final defaults (lab/benchmarks/kernels_record.py).
#  1. Background (~45 s): the bf16 GPU tests of both norm files (final backward defaults), and 4 processes that
#     fill Inductor's caches for every row of the record (their autotuning choices are then dropped).
#  2. Alone on the GPU: the record — torch.compile of every eager baseline compiled and autotuned in this process
#     before anything is timed; the copy bandwidth; every row (solkit, Liger, torch.compile) checked against
#     float64 (outputs and gradients) and timed with the harness protocol in 3 passes; A/B rounds for the close calls.
#  3. With the time left: the norm backward A/B at the final defaults (kernels_normbwd.py).
set -u
export TRITON_CACHE_DIR=/tmp/r5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/r5_inductor
START=$(date +%s)
left() { echo $(( 212 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
git log -1 --format="tree at %h %s" 2>/dev/null | cut -c1-120 || true
timeout 44 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py >"$OUT/pytest_gpu.txt" 2>&1 &
PIDS="$!"
cd benchmarks
for k in 0 1 2 3; do
  timeout 46 python3 kernels_record.py --warm-compile $k/4 >"$OUT/warm_compile$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm + tests done at $(( $(date +%s) - START ))s"; tail -q -n 4 "$OUT"/warm*.log; tail -n 4 "$OUT/pytest_gpu.txt"
T=$(left)
timeout $(( T - 25 )) python3 kernels_record.py --drop-autotune-cache --passes 3 --ab-rounds 8 --out "$OUT/kernels_record_h200_r3.json" \
  --budget-s $(( T - 40 )) --compile-budget-s 70 2>&1 | tee "$OUT/record.txt" | tail -n 70
T=$(left)
echo "normbwd A/B: ${T}s left"
[ "$T" -gt 12 ] && timeout "$T" python3 kernels_normbwd.py --no-sweep --ops rmsnorm,layernorm,add_rmsnorm,layernorm_70b \
  --ab rmsnorm,layernorm,add_rmsnorm,layernorm_70b --ab-modes bwd,fwdbwd --ab-rounds 6 --out "$OUT/kernels_normbwd_h200_r3.json" \
  --budget-s $(( T - 6 )) 2>&1 | grep -E "^\[|ab " | tail -n 30
date -u
