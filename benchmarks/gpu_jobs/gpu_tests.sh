#!/usr/bin/env bash
# budget: 590
# The whole GPU test suite (pytest -m gpu over tests/ and lab/tests/); the log is $OUT/gpu_tests.txt.
#   bash benchmarks/gpu_jobs/run_round.sh gpu_tests
set -u
{
  echo "# gpu_tests: $(date -u +%FT%TZ), tree $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
} >"$OUT/gpu_tests.txt" 2>&1
python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests lab/tests 2>&1 | tee -a "$OUT/gpu_tests.txt" | tail -n 40
exit "${PIPESTATUS[0]}"
