# budget: 150
# Session 3, round 1 (lead): the full calibration with each GEMM shape timed both as isolated and as
# back-to-back launches (the better median per shape is kept), then the GPU tests outside
# tests/kernels (harness, hardware, sol, bench, tune, profile, train) with the time left.
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
date -u
T0=$(date +%s)
timeout 80 python3 -m solkit.cli calibrate --recalibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$? $(( $(date +%s) - T0 ))s"
python3 -c "import torch, triton, json, platform; print(json.dumps({'torch': torch.__version__, 'triton': triton.__version__, 'cuda': torch.version.cuda, 'python': platform.python_version(), 'device': torch.cuda.get_device_name()}))" > "$OUT/versions.json"
LEFT=$(( T0 + 140 - $(date +%s) ))
echo "GPU tests outside tests/kernels: ${LEFT}s"
if [ "$LEFT" -gt 10 ]; then
  timeout "$LEFT" python3 -m pytest -q -m gpu -p no:cacheprovider --ignore=tests/kernels tests 2>&1 | tail -n 30 | tee "$OUT/pytest_gpu.txt"
fi
date -u
