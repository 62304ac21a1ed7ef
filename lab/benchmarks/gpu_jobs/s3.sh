# budget: 60
# Issue 3 (solkit.sol analysis): the analysis on the device's torch 2.11 + CUDA build, compared
# with the local CPU run; then the sol unit tests there if pytest is available. No GPU kernels run.
set -u
python3 lab/benchmarks/sol_analysis_smoke.py --out "$OUT"
echo "smoke exit: $?"
python3 -m solkit.cli analyze src/solkit/problems/suite/attention_causal_bwd --json > "$OUT/analyze_attention_bwd.json"
echo "cli exit: $?"
if python3 -c "import pytest" 2>/dev/null; then
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/sol/test_counting.py tests/sol/test_trace.py \
    tests/sol/test_analysis.py tests/sol/test_analyze_cli.py 2>&1 | tail -15
else
  echo "pytest not available on the device"
fi
