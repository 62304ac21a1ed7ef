# budget: 150
# Gluon softmax forward (session 7, round 2): the kept-exponentials forms (keep_e: pass 1's exponentials replace x
# in shared memory, pass 2 one bf16x2 FMA a pair) with aligned chunks, one or two compute partitions and 1-3
# programs an SM, against round 1's best (wsa_pm2, 1136.8 us) and the default, at 8192x128256, 4096x128256 and
# 1024x262144 with the copy row; every variant checked against fp64 first. Then the Gluon GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/g7_triton
START=$(date +%s)
left() { echo $(( 146 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1 2 3; do
  timeout 40 python3 kernels_softmax_gluon.py --plan r2 --warm $k/4 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
timeout 40 python3 -c "
import torch
from solkit.kernels.softmax.dispatch import softmax_forward
for n in (128256, 262144):
    softmax_forward(torch.randn(528, n, device='cuda', dtype=torch.bfloat16))
torch.cuda.synchronize(); print('default warm')
" >"$OUT/warm_default.log" 2>&1 &
PIDS="$PIDS $!"
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 3 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 50 ] && timeout $(( T - 38 )) python3 kernels_softmax_gluon.py --plan r2 --reps 30 \
  --out "$OUT/kernels_softmax_gluon_r2.json" --budget-s $(( T - 50 )) 2>&1 | tee "$OUT/r2.txt" | tail -n 40
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_gluon.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 15 "$OUT/pytest_gpu.txt"
date -u
