# budget: 240
# Session 7 (lead), final GPU check of the review pass: the GPU tests of the Gluon softmax (launcher defaults =
# round 3's configuration, tests edited after round 3), the rows / re-read / TMA softmax tests (shared test helpers,
# path_options), the Gluon GEMMs (shared availability check) and the harness's warm-up test.
set -u
export TRITON_CACHE_DIR=/tmp/lead27_triton
date -u
timeout 230 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_gluon.py \
  tests/kernels/test_softmax_rows.py tests/kernels/test_softmax_reread.py tests/kernels/test_gemm_gluon.py \
  tests/kernels/test_gemm_decode_gluon.py tests/harness/test_timing_flush.py 2>&1 | tail -n 25
date -u
