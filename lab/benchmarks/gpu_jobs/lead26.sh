# budget: 120
# Session 7 (lead): 8192x4096 and 1024x262144 forwards (solkit default, Liger where it runs, copy), each timed three
# times interleaved (plan s7rep of lab/benchmarks/kernels_softmax_wide.py): a73's first rows of these shapes ran slow.
set -u
export TRITON_CACHE_DIR=/tmp/lead26_triton
cd benchmarks
timeout 110 python3 kernels_softmax_wide.py --plan s7rep --reps 40 --out "$OUT/kernels_softmax_wide_s7rep.json" \
  --budget-s 100 2>&1 | tail -n 30
