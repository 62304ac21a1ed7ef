# budget: 170
# Session 5 (lead), final check on the final tree: the GPU tests of every kernel file changed this session
# (GEMM + Gluon GEMM after the gemm.native() refactor of their reference, norms with the new backward defaults,
# softmax with the packed defaults; the opt-in cooperative softmax path is left out as in s5d).
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
date -u
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm.py tests/kernels/test_gemm_gluon.py \
  2>&1 | tail -n 4 | tee "$OUT/gemm_tests.txt"
timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py \
  2>&1 | tail -n 4 | tee "$OUT/norm_tests.txt"
timeout 55 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py -k "not coop" \
  2>&1 | tail -n 4 | tee "$OUT/softmax_tests.txt"
date -u
