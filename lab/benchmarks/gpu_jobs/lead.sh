# budget: 180
# Main job on the H200 (issue 5): `solkit bench` on the l size class, Llama-3-8B workloads, with the
# eager, vendor, Liger and solkit backends (torch.compile needs ~15 s of compilation per problem, which
# does not fit this round's device time; its numbers come from the kernel jobs), then torch.compile on
# the memory-bound forward problems with the time left.
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
date -u
timeout 30 python3 -m solkit.cli calibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$?"
timeout 110 python3 -m solkit.cli bench --size l --models llama3-8b --backends eager,vendor,liger,solkit --reps 30 \
  --out "$OUT/bench_l" > "$OUT/bench_l.txt" 2>&1
echo "bench rc=$?"; tail -5 "$OUT/bench_l.txt"
date -u
timeout 30 python3 -m solkit.cli bench --size l --models llama3-8b --backends compile --mode fwd \
  --ops rmsnorm,add_rmsnorm,layernorm,swiglu,geglu,rope --reps 30 --out "$OUT/bench_l_compile" > "$OUT/bench_l_compile.txt" 2>&1
echo "bench compile rc=$?"
date -u
