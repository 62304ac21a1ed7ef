# budget: 200
# Session 7: the TMA softmax forward with fewer programs per SM (a smaller L2 footprint; lead20: 6 an SM read 2 %
# more than the input from DRAM instead of 8 %, 1077 us against 1100): lab/benchmarks/softmax_tma_l2probe.py --sweep at
# 8192x128256, 4096x128256 and 1024x262144, each variant timed twice (the harness's median) next to the copy.
set -u
export TRITON_CACHE_DIR=/tmp/lead21_triton
cd benchmarks
P=""
for k in 0 1 2 3; do
  timeout 70 python3 softmax_tma_l2probe.py --sweep --compile-only $k/4 >"$OUT/c128_$k.log" 2>&1 & P="$P $!"
done
for k in 0 1; do
  timeout 70 python3 softmax_tma_l2probe.py --sweep --cols 262144 --rows 1024 --compile-only $k/2 >"$OUT/c256_$k.log" 2>&1 & P="$P $!"
done
wait $P; tail -q -n 2 "$OUT"/c*.log
timeout 60 python3 softmax_tma_l2probe.py --sweep --out "$OUT/sweep_8192x128256.json" 2>&1 | tail -n 24
timeout 40 python3 softmax_tma_l2probe.py --sweep --rows 1024 --cols 262144 --out "$OUT/sweep_1024x262144.json" 2>&1 | tail -n 12
timeout 40 python3 softmax_tma_l2probe.py --sweep --rows 4096 --out "$OUT/sweep_4096x128256.json" 2>&1 | tail -n 24
