# budget: 110
# Issue 7 (first half): RMSNorm, add+RMSNorm, LayerNorm, softmax. Round 2: every GPU test of the three
# files (bf16, Llama/vocab/256k widths, >2^31 elements), then the benchmark: copy bandwidth, a short
# launcher sweep (informational), the backend table (solkit, eager torch, F.rms_norm, Liger),
# torch.compile rows, eager (no-graph) forward rows, then the cooperative wide-row softmax sweep. The
# JSON is rewritten after every row, so a kill at the budget keeps the rest.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
date -u
timeout 30 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_rmsnorm.py \
  tests/kernels/test_layernorm.py tests/kernels/test_softmax.py 2>&1 | tail -n 25 | tee "$OUT/pytest_gpu.txt"
date -u
python3 benchmarks/kernels_norm.py --sweep --sweep-budget-s 30 --budget-s 62 --compile-reserve-s 8 --coop-sweep \
  --out "$OUT/kernels_norm_round2.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
date -u
