# budget: 200
# Session 7: the TMA softmax forward at 8192x128256: group count apart from registers (per_sm sets maxnreg and the
# resident capacity; `groups` caps the groups), and other chunkings near per_sm 6 (lead21's best, 1078 us).
set -u
export TRITON_CACHE_DIR=/tmp/lead22_triton
cd benchmarks
V='{"pw6": {"per_sm": 6}, "pw8_g24": {"groups": 24}, "pw8_g20": {"groups": 20}, "pw8_g26": {"groups": 26},
"pw6_g22": {"per_sm": 6, "groups": 22}, "pw6_g20": {"per_sm": 6, "groups": 20}, "pw6_g23": {"per_sm": 6, "groups": 23},
"pw6_r160": {"per_sm": 6, "maxnreg": 160}, "pw6_r128": {"per_sm": 6, "maxnreg": 128},
"bl8_w1_pw12": {"blocks": 8, "num_warps": 1, "per_sm": 12}, "bl32_w4_pw4": {"blocks": 32, "num_warps": 4, "per_sm": 4},
"bl32_w4_pw3": {"blocks": 32, "num_warps": 4, "per_sm": 3},
"bl32_w4_pw2": {"blocks": 32, "num_warps": 4, "per_sm": 2}}'
P=""
for k in 0 1 2 3 4; do
  timeout 80 python3 softmax_tma_l2probe.py --variants "$V" --compile-only $k/5 >"$OUT/c_$k.log" 2>&1 & P="$P $!"
done
wait $P; tail -q -n 2 "$OUT"/c_*.log
timeout 90 python3 softmax_tma_l2probe.py --variants "$V" --out "$OUT/lead22_8192x128256.json" 2>&1 | tail -n 40
