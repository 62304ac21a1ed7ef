# budget: 90
# Issue 7: cross-entropy forward + backward >= 0.80 of SOL. Round 3 (session 4): the table of record with the
# module defaults (CE_CONFIG after round 2: the packed split kernel with one row of L2 bulk prefetch; round 2's
# sweep, benchmarks/results/gates_rope/2026-11-30_h200_gates_1056.json: 1.1866 ms = 0.826), the GPU tests of that default (shapes, dtypes,
# options, > 2^31 elements), then fused linear CE at 16384 tokens with the time left; each step under its own
# timeout, rows written as they come.
set -u
START=$(date +%s)
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
echo "== [$(( $(date +%s) - START ))s] table of record: cross-entropy, module defaults"
timeout 34 python3 lab/benchmarks/kernels_gates.py --out "$OUT/kernels_gates_record.json" --budget-s 30 \
  --ops cross_entropy --backends solkit,liger,eager,compile 2>&1 | grep -v Warning | tail -n 10
echo "== [$(( $(date +%s) - START ))s] GPU tests of the default"
timeout 26 python3 -m pytest -v -m gpu -p no:cacheprovider -k "default or llama3_vocab" \
  tests/kernels/test_cross_entropy_split.py tests/kernels/test_cross_entropy.py > "$OUT/tests.txt" 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed|Error" "$OUT/tests.txt" | sed 's/ *\[ *[0-9]*%\]//' | tail -n 20
LEFT=$(( 86 - ($(date +%s) - START) ))
echo "== [$(( $(date +%s) - START ))s] fused linear CE at 16384 tokens, ${LEFT}s left"
if [ "$LEFT" -gt 15 ]; then
  timeout "$LEFT" python3 lab/benchmarks/kernels_gates.py --out "$OUT/kernels_gates_flce.json" --budget-s $(( LEFT - 4 )) \
    --ops fused_linear_ce --backends solkit,compile,liger,eager 2>&1 | grep -v Warning | tail -n 6
fi
echo "== done after $(( $(date +%s) - START ))s"
