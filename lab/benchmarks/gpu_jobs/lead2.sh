# budget: 120
# Re-run of the l suite after the timing fix (GPU-side event timing; 'auto' now picks CUDA graphs
# for Triton kernels whose host launch used to hide their GPU time).
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
date -u
timeout 110 python3 -m solkit.cli bench --size l --models llama3-8b --backends eager,vendor,liger,solkit --reps 20 \
  --out "$OUT/bench_l" > "$OUT/bench_l.txt" 2>&1
echo "bench rc=$?"; tail -3 "$OUT/bench_l.txt"
rm -f "$OUT"/bench_l/results.partial.json
date -u
