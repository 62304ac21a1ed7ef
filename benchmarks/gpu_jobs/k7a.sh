# budget: 110
# Issue 7 (first half): RMSNorm, add+RMSNorm, LayerNorm, softmax. Round 1: the >2^31-element GPU
# tests, a short launcher config sweep, the backend table (solkit, eager torch, Liger), then
# torch.compile rows with the time left. The JSON is rewritten after every row, so a kill at the
# budget keeps what was measured.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
date -u
timeout 14 python3 -m pytest -q -m gpu -p no:cacheprovider -k "beyond_int32" tests/kernels/test_rmsnorm.py \
  tests/kernels/test_layernorm.py tests/kernels/test_softmax.py 2>&1 | tail -n 15 | tee "$OUT/pytest_gpu.txt"
date -u
python3 benchmarks/kernels_norm.py --sweep --sweep-budget-s 38 --budget-s 86 --compile-reserve-s 14 \
  --compile-ops rmsnorm,softmax,layernorm,add_rmsnorm,softmax_vocab,softmax_256k \
  --out "$OUT/kernels_norm_round1.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
date -u
