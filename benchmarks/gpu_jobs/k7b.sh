# budget: 120
# Issue 7 (second half): gates, RoPE, cross-entropy, fused linear CE -- correctness + timing vs eager,
# torch.compile and Liger (benchmarks/kernels_gates.py; launch configs autotuned in the run from the
# candidate lists below, every candidate checked and recorded), then the bf16 GPU tests with the time left.
set -u
START=$(date +%s)
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
python3 benchmarks/kernels_gates.py --out "$OUT/kernels_gates.json" --budget-s 92 \
  --ops cross_entropy,rope,swiglu,fused_linear_ce,geglu,rope_interleaved \
  --ce-sweep 8192:16:4:0,4096:8:4:0,4096:16:4:0,16384:16:3:1,8192:16:3:1:2,4096:16:4:1:2,4096:16:4:1:4,4096:8:4:2:4,4096:16:5:1:8 \
  --gate-sweep 8192:16,2048:4,1024:4 --rope-sweep 8:4096,2:1024,4:2048:2,8:4096:2,4:2048:4 --flce-chunks 2048,8192
LEFT=$(( 114 - ($(date +%s) - START) ))
echo "benchmark done; ${LEFT}s left for GPU tests"
if [ "$LEFT" -gt 8 ]; then
  timeout "$LEFT" python3 -m pytest -q -x -m gpu -p no:cacheprovider \
    tests/kernels/test_swiglu.py tests/kernels/test_rope.py tests/kernels/test_cross_entropy.py \
    tests/kernels/test_fused_linear_ce.py 2>&1 | tail -n 25
fi
