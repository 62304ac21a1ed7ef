# budget: 280
# Session 6 (lead), final check on the final tree: the GPU tests of gemm() after the Gluon hooks' merge in gemm.py
# (prefill Gluon, decode Gluon forced configs, Triton paths), with pytest given room for a cold Triton cache.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
date -u
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm.py tests/kernels/test_gemm_gluon.py \
  tests/kernels/test_gemm_decode_gluon.py 2>&1 | tail -n 6 | tee "$OUT/gemm_tests.txt"
date -u
# every softmax GPU test but the opt-in cooperative path's, on the final softmax tree (rows, TMA, packed fill defaults)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py tests/kernels/test_softmax_rows.py \
  -k "not coop" 2>&1 | tail -n 6 | tee "$OUT/softmax_tests.txt"
date -u
