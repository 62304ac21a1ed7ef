# budget: 200
# Issue 8 (solkit.tune), round 1: exhaustive sweeps of 11 kernel x shape tasks for the replay
# benchmark, then (in the time left) one smoke run of the live tuner on GEMM 4096^3.
set -u
START=$(date +%s)
export TRITON_CACHE_DIR=/tmp/t8_triton_cache   # cold compile cache: compile times are honest
rm -rf "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python3 benchmarks/tune_sweeps.py --out "$OUT/sweeps" --time-limit 165 2>&1 | grep -v "RuntimeWarning\|output = op"
LEFT=$(( 192 - ($(date +%s) - START) ))
echo "sweeps done; ${LEFT}s left"
if [ "$LEFT" -gt 25 ]; then
  export TRITON_CACHE_DIR=/tmp/t8_live_ours && rm -rf "$TRITON_CACHE_DIR"
  timeout "$LEFT" python3 benchmarks/tune_live.py ours --out "$OUT/live_smoke" --tag cold
fi
du -sh "$OUT"
