# budget: 100
# Session 6 helper c6, round 2: GPU tests of the warp-specialised Gluon GEMM after its producer tuple was
# shared by the two warp_specialize partition lists (PTX/SASS identical before/after for all 10 config x
# residual variants, Triton 3.6 and 3.9, compiled on the CPU). First the default config (one consumer, RES_SPLIT 4),
# the two-consumer ping-pong config and gemm()'s dispatch tests (both partition lists), then the other configs.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())' \
  | tee "$OUT/versions.txt"
date -u
timeout 55 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_gemm_gluon.py \
  -k "rs4 or pingpong or backend" 2>&1 | tail -n 8 | tee "$OUT/gluon_tests_a.txt"
date -u
timeout 38 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_gemm_gluon.py \
  -k "not (rs4 or pingpong or backend)" 2>&1 | tail -n 8 | tee "$OUT/gluon_tests_b.txt"
date -u
