# budget: 110
# Issue 7 (second half), round 3: gates, RoPE, cross-entropy, fused linear CE -- correctness + timing vs eager,
# torch.compile and Liger (benchmarks/kernels_gates.py), harness timing protocol (method auto: in-graph
# per-call events for short calls; read L2 flush). CE and RoPE launch configs are autotuned in the run from
# the candidate lists below (every candidate checked and recorded); then the bf16 GPU tests with the time left.
# CE candidates: block:warps:stages:progs_per_sm:split:flat:prefetch:evict:programs:hold
# RoPE candidates: warps:max_tile:tokens:tile
set -u
START=$(date +%s)
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
python3 benchmarks/kernels_gates.py --out "$OUT/kernels_gates.json" --budget-s 94 --probe-fwd \
  --ops cross_entropy,rope,rope_interleaved,swiglu,geglu,fused_linear_ce \
  --ce-sweep 16384:16:3:1:1:1:0:0:0:0,8192:16:5:1:1:1:0:0:0:0,8192:16:1:1:1:1:2:0:0:0,8192:16:1:1:1:1:3:0:0:0,8192:16:1:1:1:1:3:1:0:0,8192:16:5:1:1:1:0:1:0:0,8192:16:1:1:1:1:3:0:100:0,8192:16:1:1:1:1:2:0:0:4,8192:8:1:1:1:1:2:0:0:4,4096:8:1:2:1:1:3:0:0:0 \
  --rope-sweep 4:8192:1:1,8:8192:1:1,4:16384:2:1,8:16384:2:1,8:32768:4:1,4:2048:2:0
LEFT=$(( 106 - ($(date +%s) - START) ))
echo "benchmark done; ${LEFT}s left for GPU tests"
if [ "$LEFT" -gt 8 ]; then
  timeout "$LEFT" python3 -m pytest -q -x -m gpu -p no:cacheprovider \
    tests/kernels/test_cross_entropy.py tests/kernels/test_rope.py tests/kernels/test_swiglu.py \
    tests/kernels/test_fused_linear_ce.py 2>&1 | tail -n 25
fi
