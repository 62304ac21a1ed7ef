# budget: 110
# Issue 6, round 3 (sweep round): the new split-K decode kernel over every decode shape first (the
# most promising), then the prefill variants at the seed's shape and at twice its M, then a
# torch.compile probe at the seed's shape if time is left. New timing protocol: harness 'auto'
# (graph_events under 100 us, events above), read L2 flush. The JSON is rewritten after every
# shape, so a kill keeps the rest.
set -u
export TRITON_CACHE_DIR=/tmp/k6_triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/k6_inductor_cache
python3 benchmarks/gemm_oproj.py --precompile 8 --precompile-timeout-s 45 --sweep only --sweep-decode all --sweep-prefill two --sweep-decode-first \
  --kernel-names --compile-probe --reps 40 --trials 3 --sweep-trials 2 --budget-s 102 --compile-reserve-s 22 \
  --out "$OUT/gemm_oproj_h200_round3_r1.json" 2>&1 | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]}"
