# budget: 150
# Session 4 (lead), review pass: the split cross-entropy kernels' shared preamble moved into one @triton.jit
# helper (_word_chunk_geometry). Same inlined code expected; this checks it: every CE / fused linear CE GPU
# test, then the default's forward + backward row (solkit and Liger) with the harness protocol.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
timeout 75 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_cross_entropy.py \
  tests/kernels/test_cross_entropy_split.py tests/kernels/test_fused_linear_ce.py 2>&1 | tail -n 6 | tee "$OUT/ce_tests.txt"
timeout 40 python3 lab/benchmarks/kernels_gates.py --out "$OUT/kernels_gates_review.json" --budget-s 34 \
  --ops cross_entropy --backends solkit,liger 2>&1 | grep -v Warning | tail -n 8
