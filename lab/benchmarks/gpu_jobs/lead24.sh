# budget: 150
# Session 7 (lead): the suite's softmax rows again with this session's wide-softmax defaults (TMA forward at 6
# programs an SM with the one-word exchange): `solkit bench --ops softmax,softmax_bwd` (l size class, every
# backend), after the calibration bench runs itself on a fresh machine.
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
mkdir -p "$SOLKIT_CACHE_DIR"
date -u
T1=$(date +%s)
COLUMNS=200 timeout 140 python3 -m solkit.cli bench --ops softmax,softmax_bwd --compile-workers 4 \
  --out "$OUT/bench_softmax" > "$OUT/bench_softmax.txt" 2>&1
echo "bench rc=$? wall=$(( $(date +%s) - T1 ))s" | tee "$OUT/bench_wall.txt"
tail -30 "$OUT/bench_softmax.txt"
python3 -c "import torch, triton, json, platform; print(json.dumps({'torch': torch.__version__, 'triton': triton.__version__, 'cuda': torch.version.cuda, 'python': platform.python_version(), 'device': torch.cuda.get_device_name()}))" > "$OUT/versions.json"
du -sh "$OUT"/*
