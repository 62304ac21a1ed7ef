# budget: 130
# Round 3 / part 1 (issue 5): the full calibration with the new GEMM shape list, then a check of the
# torch.compile warm-up on the GPU: `solkit bench` on the l class, Llama-3-8B workloads, eager +
# compile (compile rows warmed in parallel worker processes first), with the wall time of each phase.
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
date -u
T0=$(date +%s)
timeout 40 python3 -m solkit.cli calibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$? $(( $(date +%s) - T0 ))s"
T1=$(date +%s)
timeout 85 python3 -m solkit.cli bench --size l --models llama3-8b --backends eager,compile --reps 20 \
  --out "$OUT/bench_l_compile" > "$OUT/bench_l_compile.txt" 2>&1
echo "bench rc=$? $(( $(date +%s) - T1 ))s"; tail -5 "$OUT/bench_l_compile.txt"
python3 -c "import json; d=json.load(open('$OUT/bench_l_compile/results.json')); print(d['meta'].get('compile_warmup'))" || true
rm -f "$OUT"/bench_l_compile/*.png "$OUT"/bench_l_compile/report.html
date -u
