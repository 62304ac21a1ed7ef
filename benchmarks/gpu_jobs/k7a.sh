# budget: 100
# Issue 7 (norms and softmax half), round 2 of this session: every GPU test of the three kernel files
# (bf16 at Llama/vocab/256k widths, the split-row and cooperative softmax, >2^31 elements), then the
# benchmark under the harness's protocol (method auto = graph_events for short calls, read L2 flush):
# copy bandwidth, the wide-row softmax sweep (split-row variants against the looped path) and a few
# forward variants around the new norm defaults, the
# backend table with the defaults set from round 1 and the wide softmax config adopted from this
# sweep (solkit, solkit's looped wide softmax, eager torch,
# F.rms_norm, Liger), then the torch.compile rows. The JSON is rewritten after every row.
set -u
export TRITON_CACHE_DIR=/tmp/k7a_triton_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
date -u
timeout 38 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_rmsnorm.py \
  tests/kernels/test_layernorm.py tests/kernels/test_softmax.py 2>&1 | tail -n 25 | tee "$OUT/pytest_gpu.txt"
date -u
python3 benchmarks/kernels_norm.py --sweep --sweep-ops softmax_vocab,softmax_256k,layernorm_fwd_extra,rmsnorm_fwd_extra --sweep-budget-s 32 --adopt-wide-softmax \
  --budget-s 52 --compile-reserve-s 5 --out "$OUT/kernels_norm_round3b.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader || true
date -u
