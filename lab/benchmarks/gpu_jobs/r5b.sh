# budget: 150
# Session 5, round 2 (helper: norm backwards + issue-7 record).
#  1. Background (~45 s): the bf16 GPU tests of both norm files with the new backward defaults (dW reduced inside
#     the kernel after a grid barrier, balanced grid, at 4096 wide); 3 processes compile the norm-backward
#     variants; 4 processes fill Inductor's caches for every row of the record.
#  2. Alone on the GPU: lab/benchmarks/kernels_normbwd.py, a short sweep (the TMA RMSNorm backward, rows pipelined
#     through shared memory, 3-6 stages; weight re-read, a third LayerNorm program an
#     SM, 70B widths; LayerNorm forward one-piece shapes at 4096), then interleaved A/B rounds of the new defaults against the previous ones (backward alone and
#     after the forward), 8192x4096 and 8192x8192.
#  3. Alone: lab/benchmarks/kernels_record.py, every row of issue 7 (Inductor's .best_config dropped first, so
#     torch.compile autotunes in this process before anything is timed).
set -u
export TRITON_CACHE_DIR=/tmp/r5_triton TORCHINDUCTOR_CACHE_DIR=/tmp/r5_inductor
START=$(date +%s)
left() { echo $(( 144 - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv,noheader || true
NB_OPS="rmsnorm,layernorm,add_rmsnorm,rmsnorm_70b,layernorm_70b"
timeout 44 python3 -m pytest -q -m gpu -p no:cacheprovider -k "not beyond_int32" \
  tests/kernels/test_rmsnorm.py tests/kernels/test_layernorm.py >"$OUT/pytest_gpu.txt" 2>&1 &
PIDS="$!"
cd benchmarks
for k in 0 1 2; do
  timeout 40 python3 kernels_normbwd.py --ops "$NB_OPS" --ab "$NB_OPS" --warm $k/3 >"$OUT/warm$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
for k in 0 1 2 3; do
  timeout 44 python3 kernels_record.py --warm-compile $k/4 >"$OUT/warm_compile$k.log" 2>&1 &
  PIDS="$PIDS $!"
done
wait $PIDS
echo "warm + tests done at $(( $(date +%s) - START ))s"; tail -q -n 4 "$OUT"/warm*.log; tail -n 4 "$OUT/pytest_gpu.txt"
timeout 40 python3 kernels_normbwd.py --ops "$NB_OPS" --ab "$NB_OPS" --ab-modes bwd,fwdbwd --ab-rounds 6 --fwd-ops layernorm \
  --out "$OUT/kernels_normbwd_h200_r2.json" --budget-s 36 2>&1 | tee "$OUT/normbwd.txt" | grep -vE "^(regs| +(copy|mul1)_events)" | tail -n 70
T=$(left)
echo "record: ${T}s left"
[ "$T" -gt 12 ] && timeout "$T" python3 kernels_record.py --drop-autotune-cache --out "$OUT/kernels_record_h200_r2.json" \
  --budget-s $(( T - 8 )) --compile-budget-s $(( T / 2 )) 2>&1 | tee "$OUT/record.txt" | tail -n 60
date -u
