# budget: 560
# Round 4 (issue 5): the main job as a user runs it on a fresh H200 -- `solkit bench` with no
# arguments (l size class, every model, every backend: eager, compile, vendor, Liger, solkit), after
# a full calibration, timed end to end. Then, with the time left, the m size class.
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
date -u
T0=$(date +%s)
timeout 60 python3 -m solkit.cli calibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$? $(( $(date +%s) - T0 ))s"
T1=$(date +%s)
COLUMNS=200 timeout 420 python3 -m solkit.cli bench --out "$OUT/bench_l" > "$OUT/bench_l.txt" 2>&1
echo "bench rc=$? wall=$(( $(date +%s) - T1 ))s (calibration before it: $(( T1 - T0 ))s)" | tee "$OUT/bench_l_wall.txt"
tail -8 "$OUT/bench_l.txt"
LEFT=$(( T0 + 545 - $(date +%s) ))
if [ "$LEFT" -gt 60 ]; then
  T2=$(date +%s)
  COLUMNS=200 timeout $(( LEFT - 5 )) python3 -m solkit.cli bench --size m --backends eager,vendor,liger,solkit \
    --out "$OUT/bench_m" > "$OUT/bench_m.txt" 2>&1
  echo "bench m rc=$? wall=$(( $(date +%s) - T2 ))s" | tee -a "$OUT/bench_l_wall.txt"
fi
python3 -c "import torch, triton, json, platform; print(json.dumps({'torch': torch.__version__, 'triton': triton.__version__, 'cuda': torch.version.cuda, 'python': platform.python_version(), 'device': torch.cuda.get_device_name()}))" > "$OUT/versions.json"
du -sh "$OUT"/*
date -u
