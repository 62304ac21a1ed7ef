# budget: 200
# Issue 8 (solkit.tune), round 1: exhaustive sweeps of 11 kernel x shape tasks for the replay benchmark.
set -u
export TRITON_CACHE_DIR=/tmp/t8_triton_cache   # cold compile cache: compile times are honest
rm -rf "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python3 benchmarks/tune_sweeps.py --out "$OUT/sweeps" --time-limit 180 2>&1 | grep -v "RuntimeWarning\|output = op"
echo "sweep exit: $?"
du -sh "$OUT"
