# budget: 100
# Session 6 helper c6, round 1: GPU tests of the kernel files whose duplicates were factored out (no change to
# the compiled code expected: SASS compared byte for byte before/after with Triton 3.6 for sm_90 on the CPU).
# Cross-entropy (kernels/common/spin.py now holds the tagged-word barrier; _ce_packed's _await_fast is gone), then
# the norm backwards (one TMA preamble for RMSNorm and LayerNorm). Each pytest call has its own timeout and
# its summary goes to $OUT.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())' \
  | tee "$OUT/versions.txt"
date -u
timeout 52 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_cross_entropy.py \
  tests/kernels/test_cross_entropy_split.py tests/kernels/test_fused_linear_ce.py 2>&1 | tail -n 8 | tee "$OUT/ce_tests.txt"
date -u
timeout 38 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_rmsnorm.py \
  tests/kernels/test_layernorm.py 2>&1 | tail -n 8 | tee "$OUT/norm_tests.txt"
date -u
