# budget: 30
# Issue 6, config selection, optional re-check (only if a round has room): the first calls of the l suite's
# six GEMM rows through solkit.tune after the gate's error measure went to slices (commit a6b2443) and the
# tune cache started holding a tuning's records until it has a winner: first-call wall time and extra
# peak memory (round 2 measured 1.6-20.9 GB before). Rounds 1-2: benchmarks/results/gemm_tuner_h200_round*.json.
set -u
export TRITON_CACHE_DIR=/tmp/k6t_triton_cache
rm -rf "$TRITON_CACHE_DIR"
python3 lab/benchmarks/gemm_tuner_check.py --out "$OUT" --shapes bench_l --stop-after tune 2>&1 | tail -n 20
echo "check rc=${PIPESTATUS[0]}"
