# budget: 235
# Gluon softmax forward (session 7, round 1): correctness of the warp-specialised kernel
# (src/solkit/kernels/softmax/gluon.py) at a few shapes against fp64 (NaN-poisoned outputs), then a first sweep at
# 8192x128256 (and 1024x262144) with the copy row and the current default timed in the same job (plan r1: one
# compute partition; plan r1ws: pass 1 and pass 2 in two partitions, run in a process of its own), then the GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/g7_triton
START=$(date +%s)
left() { echo $(( 231 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
cd benchmarks
PIDS=""
for k in 0 1 2; do
  timeout 50 python3 kernels_softmax_gluon.py --plan r1 --warm $k/3 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
for k in 0 1; do
  timeout 50 python3 kernels_softmax_gluon.py --plan r1ws --warm $k/2 >"$OUT/warmws$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
# the default path's kernels too (Triton cache), on a few rows
timeout 50 python3 -c "
import torch
from solkit.kernels.softmax.dispatch import softmax_forward
for n in (128256, 262144):
    softmax_forward(torch.randn(528, n, device='cuda', dtype=torch.bfloat16))
torch.cuda.synchronize(); print('default warm')
" >"$OUT/warm_default.log" 2>&1 &
PIDS="$PIDS $!"
wait $PIDS
echo "warm done at $(( $(date +%s) - START ))s"; tail -q -n 4 "$OUT"/warm*.log
T=$(left)
[ "$T" -gt 60 ] && timeout 95 python3 kernels_softmax_gluon.py --plan r1 --reps 30 \
  --out "$OUT/kernels_softmax_gluon_r1.json" --budget-s 80 2>&1 | tee "$OUT/r1.txt" | tail -n 45
T=$(left)
[ "$T" -gt 40 ] && timeout $(( T > 70 ? 45 : T - 25 )) python3 kernels_softmax_gluon.py --plan r1ws --reps 30 \
  --out "$OUT/kernels_softmax_gluon_r1ws.json" --budget-s 35 2>&1 | tee "$OUT/r1ws.txt" | tail -n 25
cd ..
T=$(left)
echo "pytest with ${T}s left"
[ "$T" -gt 10 ] && timeout "$T" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_softmax_gluon.py \
  >"$OUT/pytest_gpu.txt" 2>&1
tail -n 15 "$OUT/pytest_gpu.txt"
date -u
