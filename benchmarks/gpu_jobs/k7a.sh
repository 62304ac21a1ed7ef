# budget: 110
# Issue 7 (norms and softmax half), round 1 of this session: the GPU tests of the three kernel files
# (bf16 at Llama/vocab/256k widths, the cooperative softmax; the >2^31-element tests are left for
# round 2), then the benchmark under the harness's protocol (timing method auto = graph_events for
# short calls, read L2 flush): copy bandwidth, the launcher sweep (wide-row softmax looped vs
# cooperative variants first, then LayerNorm, RMSNorm, add+RMSNorm, softmax, the dW reduction), the
# backend table (solkit, eager torch, F.rms_norm, Liger), then torch.compile rows while time is left.
# The JSON is rewritten after every row, so a kill at the budget keeps the rest.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
date -u
timeout 25 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" tests/kernels/test_rmsnorm.py \
  tests/kernels/test_layernorm.py tests/kernels/test_softmax.py 2>&1 | tail -n 25 | tee "$OUT/pytest_gpu.txt"
date -u
python3 benchmarks/kernels_norm.py --sweep --sweep-budget-s 48 --budget-s 72 --compile-reserve-s 5 \
  --sweep-ops softmax_vocab,softmax_256k,layernorm,rmsnorm,partial_sum,add_rmsnorm,softmax \
  --out "$OUT/kernels_norm_round3a.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
date -u
