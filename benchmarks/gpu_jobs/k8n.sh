# budget: 70
# Norm forwards at Llama-3-70B width (8192x8192 bf16), round 5 / session round 1: why torch.compile's RMSNorm
# forward beats solkit's. A background process compiles the eager HF RMSNorm with torch.compile, keeping
# Inductor's output code and autotuning choice (TORCH_LOGS=output_code, its cache dir copied to $OUT/inductor);
# six processes compile the variants' Triton kernels into a shared cache meanwhile. Then one process (alone on
# the GPU) sweeps solkit's forward launch shapes at 70B (RMSNorm, LayerNorm, add+RMSNorm) and 8B RMSNorm, each
# checked against float64, and runs A/B rounds of the fastest RMSNorm 70B variants against Liger and compile.
set -u
export TRITON_CACHE_DIR=/tmp/k8n_triton TORCHINDUCTOR_CACHE_DIR=/tmp/k8n_inductor TORCHINDUCTOR_COMPILE_THREADS=1
START=$(date +%s)
left() { echo $(( 64 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
TORCH_LOGS=output_code timeout 30 python3 kernels_norm_r5.py --warm-compile >"$OUT/compile_output_code.txt" 2>&1 &
CPID=$!
PIDS=""
for k in 0 1 2 3 4 5; do
  timeout 26 python3 kernels_norm_r5.py --warm $k/6 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "triton warm done at $(( $(date +%s) - START ))s"; tail -n 2 "$OUT"/warm*.log
wait $CPID
echo "compile warm done at $(( $(date +%s) - START ))s"; grep -E "compiled|Error" "$OUT/compile_output_code.txt" | tail -n 3
T=$(left)
[ "$T" -gt 8 ] && timeout "$T" python3 kernels_norm_r5.py --out "$OUT/kernels_norm_round5a.json" --budget-s $(( T - 12 )) \
  2>&1 | tee "$OUT/r5.txt" | grep -vE "^ +(copy|mul1)_events" | tail -n 60
mkdir -p "$OUT/inductor"
find /tmp/k8n_inductor -type f \( -name "*.best_config" -o -name "*.py" \) -size -300k 2>/dev/null | head -n 40 |
  while read -r f; do cp "$f" "$OUT/inductor/$(basename "$(dirname "$f")")_$(basename "$f")"; done
ls "$OUT/inductor" | head -n 20
date -u
