# budget: 170
# Gluon softmax forward (session 7, round 3, of record): the chosen configuration (VARIANTS "best" / "best256k" of
# lab/benchmarks/kernels_softmax_gluon.py) at 8192x128256, 4096x128256 and 1024x262144 against the default forward
# (solkit.kernels.softmax.dispatch.softmax_forward) and the copy row, two samples each (plus single samples of per_sm 4 and lag 2), every Gluon row checked against fp64
# over every row first; then the Gluon GPU tests (tests/kernels/test_softmax_gluon.py).
set -u
export TRITON_CACHE_DIR=/tmp/g7_triton
START=$(date +%s)
left() { echo $(( 166 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
cd benchmarks
PIDS=""
for k in 0 1; do
  timeout 40 python3 kernels_softmax_gluon.py --plan r3 --warm $k/2 >"$OUT/warm$k.log" 2>&1 &
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
[ "$T" -gt 60 ] && timeout $(( T - 65 )) python3 kernels_softmax_gluon.py --plan r3 --reps 40 \
  --out "$OUT/kernels_softmax_gluon_r3.json" --budget-s $(( T - 75 )) 2>&1 | tee "$OUT/r3.txt" | tail -n 30
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_gluon.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 15 "$OUT/pytest_gpu.txt"
date -u
