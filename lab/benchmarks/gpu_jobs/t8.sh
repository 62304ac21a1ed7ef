# budget: 70
# Issue 8 (solkit.tune), round 2: live tuning of GEMM bf16 4096^3 with solkit.tune's default strategy and
# budget, then triton.autotune over the same 72-config list, then both winners re-timed with the
# harness. Each side runs in a fresh process with its own empty Triton cache (cold compiles).
set -u
START=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
export TRITON_CACHE_DIR=/tmp/t8_live_ours && rm -rf "$TRITON_CACHE_DIR"
timeout 28 python3 lab/benchmarks/tune_live.py ours --out "$OUT/live" --tag cold
echo "ours done at $(( $(date +%s) - START ))s"
export TRITON_CACHE_DIR=/tmp/t8_live_triton && rm -rf "$TRITON_CACHE_DIR"
LEFT=$(( 66 - ($(date +%s) - START) ))
timeout "$LEFT" python3 lab/benchmarks/tune_live.py triton --out "$OUT/live"
echo "triton+compare done at $(( $(date +%s) - START ))s"
