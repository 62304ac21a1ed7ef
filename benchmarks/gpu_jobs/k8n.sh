# budget: 70
# Norm forwards at Llama-3-70B width (8192x8192 bf16), session round 2: the one-piece two-pass forwards
# (straight-line code, the shape of torch.compile's kernel; round 1 showed ptxas serialising the loads in a
# loop) are the 8192-wide defaults now. Background: five processes torch.compile the eager baselines (one op
# each), six compile the variants' Triton kernels. Then one process alone on the GPU: a short sweep of the
# one-piece kernels (70B RMSNorm, LayerNorm, add+RMSNorm), then forward A/B rounds of the defaults, the previous
# defaults and the sweep's best against Liger and torch.compile at 70B and 8B; GPU tests if time is left.
set -u
export TRITON_CACHE_DIR=/tmp/k8n_triton TORCHINDUCTOR_CACHE_DIR=/tmp/k8n_inductor TORCHINDUCTOR_COMPILE_THREADS=1
START=$(date +%s)
left() { echo $(( 66 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for op in rmsnorm_70b layernorm_70b rmsnorm add_rmsnorm_70b add_rmsnorm; do
  timeout 28 python3 kernels_norm_r5.py --warm-compile --ab $op >"$OUT/compile_$op.txt" 2>&1 &
  PIDS="$PIDS $!"
done
for k in 0 1 2 3 4 5; do
  timeout 24 python3 kernels_norm_r5.py --warm $k/6 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 1 "$OUT"/warm*.log "$OUT"/compile_*.txt
T=$(left)
[ "$T" -gt 8 ] && timeout "$T" python3 kernels_norm_r5.py --out "$OUT/kernels_norm_round5b.json" --budget-s $(( T - 10 )) \
  2>&1 | tee "$OUT/r5.txt" | grep -vE "^ +(copy|mul1)_events" | tail -n 50
mkdir -p "$OUT/inductor"
find /tmp/k8n_inductor -type f -name "*.best_config" 2>/dev/null | head -n 20 |
  while read -r f; do cp "$f" "$OUT/inductor/"; done
find /tmp/k8n_inductor -type f -name "*.py" -size -100k 2>/dev/null | xargs -r grep -l "@triton.jit" | head -n 20 |
  while read -r f; do cp "$f" "$OUT/inductor/"; done
cd ..
T=$(left)
[ "$T" -gt 6 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py 2>&1 | tail -n 8 | tee "$OUT/pytest_gpu.txt"
date -u
