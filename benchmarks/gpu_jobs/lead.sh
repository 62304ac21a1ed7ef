# budget: 200
# Foundation + main job: full calibration (committed as benchmarks/results/calibration_h200.json), the
# foundation's GPU tests, then a first pass of `solkit bench` on the m size class (no compile: round 1
# checks the GPU path of the runner; the l suite with every backend runs in round 2).
set -u
export SOLKIT_CACHE_DIR=/tmp/solkit-cache
date -u
timeout 100 python3 -m solkit.cli calibrate --recalibrate --json > "$OUT/calibration.json" 2> "$OUT/calibrate.err"
echo "calibrate rc=$?"; tail -3 "$OUT/calibrate.err"
python3 -m solkit.cli calibrate 2>&1 | tail -20
timeout 20 python3 -m pytest -q -p no:cacheprovider -m gpu tests/hardware 2>&1 | tail -5
date -u
timeout 70 python3 -m solkit.cli bench --size m --backends eager,vendor,liger,solkit --reps 10 --out "$OUT/bench_m" \
  > "$OUT/bench_m.txt" 2>&1
echo "bench rc=$?"; tail -60 "$OUT/bench_m.txt"
rm -f "$OUT"/bench_m/*.png
date -u
