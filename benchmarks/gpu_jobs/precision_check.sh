#!/usr/bin/env bash
# budget: 120
# The T_SOL precision policy against measurement (docs/precision.md): the upcast bf16 linear+gelu
# (as written and as a bf16 cuBLAS solution) and an fp32 conv under cuDNN's default TF32, with T_SOL on the
# fastest and as_written bases (datasheet and calibrated). Copy $OUT/precision_check.json to
# benchmarks/results/sol/<date>_h200_precision_check.json.
#   bash benchmarks/gpu_jobs/run_round.sh precision_check
set -u
{
  echo "# precision_check: $(date -u +%FT%TZ)"
  python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/env.txt"
python3 -m solkit.cli calibrate --quick --json >"$OUT/calibration.json" 2>"$OUT/calibrate_log.txt"
echo "calibrate rc=$?"
timeout 90 python3 benchmarks/gpu_jobs/precision_check.py --out "$OUT/precision_check.json" 2>&1 \
  | tee "$OUT/precision_check.txt"
echo "precision_check rc=${PIPESTATUS[0]}"
