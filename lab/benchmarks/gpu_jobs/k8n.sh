# budget: 50
# Norm forwards at Llama-3-70B width, session round 3 (final check): the adopted defaults (one-piece two-pass
# forwards at 8192 wide: RMSNorm 16 warps with the packed bf16 product, add+RMSNorm 32 warps, LayerNorm 8 warps;
# RMSNorm at 4096 wide the one-piece 4096 x 8 warps). Meanwhile (background): the bf16 GPU tests of both norm
# files, torch.compile of the 70B RMSNorm baseline, the Triton kernels compiled. Then alone on the GPU: forward
# A/B rounds of the defaults against the alternatives, Liger and (70B RMSNorm) torch.compile, 70B and 8B.
set -u
export TRITON_CACHE_DIR=/tmp/k8n_triton TORCHINDUCTOR_CACHE_DIR=/tmp/k8n_inductor TORCHINDUCTOR_COMPILE_THREADS=1
START=$(date +%s)
left() { echo $(( 46 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
timeout 24 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py >"$OUT/pytest_gpu.txt" 2>&1 &
PIDS="$!"
cd benchmarks
timeout 22 python3 kernels_norm_r5.py --final --warm-compile --ab rmsnorm_70b >"$OUT/compile_rmsnorm_70b.txt" 2>&1 &
PIDS="$PIDS $!"
for k in 0 1 2 3; do
  timeout 20 python3 kernels_norm_r5.py --final --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm + tests done at $(( $(date +%s) - START ))s"; tail -q -n 1 "$OUT"/warm*.log "$OUT"/compile_*.txt; tail -n 4 "$OUT/pytest_gpu.txt"
T=$(left)
[ "$T" -gt 8 ] && timeout "$T" python3 kernels_norm_r5.py --final --compile-ops rmsnorm_70b --out "$OUT/kernels_norm_round5c.json" \
  --budget-s $(( T - 6 )) 2>&1 | tee "$OUT/r5.txt" | grep -vE "^ +(copy|mul1)_events" | tail -n 40
find /tmp/k8n_inductor -type f -name "*.best_config" 2>/dev/null | head -n 5 | while read -r f; do cp "$f" "$OUT/"; done
date -u
