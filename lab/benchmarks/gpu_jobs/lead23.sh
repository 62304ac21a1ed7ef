# budget: 200
# Session 7: the TMA softmax forward at 8192x128256 around lead22's best (24 groups, 128 registers: 1069-1071 us):
# registers, stages, L2 prefetch, store hint, neighbouring group counts, other chunkings at 24 groups.
set -u
export TRITON_CACHE_DIR=/tmp/lead23_triton
cd benchmarks
V='{"g24": {"groups": 24}, "g24_r112": {"groups": 24, "maxnreg": 112}, "g24_r96": {"groups": 24, "maxnreg": 96},
"g24_st2": {"groups": 24, "stages": 2}, "g24_st4": {"groups": 24, "stages": 4}, "g24_hint0": {"groups": 24, "hint": 0},
"g24_pf0_st4": {"groups": 24, "l2_prefetch": 0, "stages": 4}, "g21": {"groups": 21}, "g25": {"groups": 25},
"g16": {"groups": 16}, "g12": {"groups": 12}, "g24_bl8_w1": {"groups": 24, "blocks": 8, "num_warps": 1, "per_sm": 16},
"g24_w4": {"groups": 24, "num_warps": 4, "per_sm": 6}, "g24_w1": {"groups": 24, "num_warps": 1, "per_sm": 16}}'
P=""
for k in 0 1 2 3 4; do
  timeout 80 python3 softmax_tma_l2probe.py --variants "$V" --compile-only $k/5 >"$OUT/c_$k.log" 2>&1 & P="$P $!"
done
wait $P; tail -q -n 2 "$OUT"/c_*.log
timeout 90 python3 softmax_tma_l2probe.py --variants "$V" --out "$OUT/lead23_8192x128256.json" 2>&1 | tail -n 40
