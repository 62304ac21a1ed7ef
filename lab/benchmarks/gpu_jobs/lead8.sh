# budget: 230
# Session 4 (lead), final check: the GPU tests of the defaults adopted this session that the helpers' job caps
# left out -- the norms' >2^31-element tests (the one-piece RMSNorm forward is the 4096-wide default now), every
# cross-entropy / fused linear CE GPU test with the final CE default (packed split kernel + L2 prefetch), and the
# GEMM autograd test cut by round 2's step timeout.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py \
  -k "beyond_int32 or add_rmsnorm" -rA 2>&1 | tail -n 12 | tee "$OUT/norm_tests.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_cross_entropy.py \
  tests/kernels/test_cross_entropy_split.py tests/kernels/test_fused_linear_ce.py 2>&1 | tail -n 12 | tee "$OUT/ce_tests.txt"
timeout 40 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm.py -k "bf16_gradients" 2>&1 \
  | tail -n 6 | tee "$OUT/gemm_tests.txt"
