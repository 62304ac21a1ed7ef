# budget: 500
# Session 5 (lead): the main job again as a user runs it on a fresh H200 -- a full calibration, then
# `solkit bench` with no arguments (l size class, every model, every backend), timed end to end, with this
# session's defaults (Gluon warp-specialised prefill GEMM, packed wide softmax, fused-reduction norm backwards).
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
date -u
T0=$(date +%s)
timeout 70 python3 -m solkit.cli calibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$? $(( $(date +%s) - T0 ))s"
T1=$(date +%s)
COLUMNS=200 timeout 415 python3 -m solkit.cli bench --out "$OUT/bench_l" > "$OUT/bench_l.txt" 2>&1
echo "bench rc=$? wall=$(( $(date +%s) - T1 ))s (calibration before it: $(( T1 - T0 ))s)" | tee "$OUT/bench_l_wall.txt"
tail -8 "$OUT/bench_l.txt"
python3 -c "import torch, triton, json, platform; print(json.dumps({'torch': torch.__version__, 'triton': triton.__version__, 'cuda': torch.version.cuda, 'python': platform.python_version(), 'device': torch.cuda.get_device_name()}))" > "$OUT/versions.json"
du -sh "$OUT"/*
date -u
