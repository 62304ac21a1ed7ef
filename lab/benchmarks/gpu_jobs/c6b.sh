# budget: 100
# Session 6 helper c6, round 2. (1) GPU tests of the warp-specialised Gluon GEMM after its producer and consumer
# arguments became one run-time tuple each, shared by the two warp_specialize partition lists (SASS identical
# before/after for all 10 config x residual variants, Triton 3.6 and 3.9, tools/sass_compare.py on the CPU):
# the default config (one consumer, RES_SPLIT 4),
# the two-consumer ping-pong config and gemm()'s dispatch tests, i.e. both partition lists. (2) The 5 CE GPU
# tests round 1 (c6a) did not reach before its 52 s timeout (47 of 52 passed there, none failed). (3) The
# other Gluon configs with what is left.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())' \
  | tee "$OUT/versions.txt"
date -u
timeout 32 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_gemm_gluon.py \
  -k "rs4 or pingpong or backend" 2>&1 | tail -n 8 | tee "$OUT/gluon_tests_a.txt"
date -u
timeout 28 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_fused_linear_ce.py \
  tests/kernels/test_cross_entropy_split.py -k "lean-64-256000 or forward_only or more_than_2_31 or fused_linear" \
  2>&1 | tail -n 8 | tee "$OUT/ce_tests_rest.txt"
date -u
timeout 30 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_gemm_gluon.py \
  -k "not (rs4 or pingpong or backend)" 2>&1 | tail -n 8 | tee "$OUT/gluon_tests_b.txt"
date -u
