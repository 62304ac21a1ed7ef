# budget: 150
# Session 6 (lead), review pass: the decode GEMM GPU tests after gemm_decode_gluon.try_gemm looks up its rule
# before the device checks (the default table has no rule: the decode path skips them).
set -u
date -u
timeout 140 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm_decode_gluon.py \
  tests/kernels/test_gemm_decode.py 2>&1 | tail -n 6 | tee "$OUT/decode_tests.txt"
date -u
