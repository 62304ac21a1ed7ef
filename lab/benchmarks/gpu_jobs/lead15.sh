# budget: 200
# Session 6 (lead), review pass: every softmax GPU test but the opt-in cooperative path's, after the packed
# launchers' shared plan (_softmax_packed._plan) and the TMA forward's use of _partials/_sms.
set -u
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
date -u
timeout 190 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax.py tests/kernels/test_softmax_rows.py \
  -k "not coop" 2>&1 | tail -n 6 | tee "$OUT/softmax_tests.txt"
date -u
