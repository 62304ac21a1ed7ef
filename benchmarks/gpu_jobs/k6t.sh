# budget: 40
# Issue 6, config selection, round 2: the first calls of the l suite's six GEMM rows (what `solkit bench`'s
# main job tunes: M = 8192, N/K up to 57344/28672) through solkit.tune.autotune from a cold Triton cache
# and an empty tune cache (wall time, extra peak memory, evaluations), a second process reading them back,
# steady state (no host sync, CUDA graph replay), then triton.autotune's picks and the host cost per
# call of both selectors interleaved. Round 1 (default shapes, every phase): results/gemm_tuner_h200_round1.json.
set -u
export TRITON_CACHE_DIR=/tmp/k6t_triton_cache
rm -rf "$TRITON_CACHE_DIR"
python3 benchmarks/gemm_tuner_check.py --out "$OUT" --shapes bench_l --stop-after triton 2>&1 | tail -n 40
echo "check rc=${PIPESTATUS[0]}"
