#!/usr/bin/env bash
# budget: 590
# solkit bench --size l (the release table: docs/bench.md), JSON, CSV, markdown and HTML under $OUT/bench_l.
#   bash benchmarks/gpu_jobs/run_round.sh bench_l
set -u
python3 -m solkit.cli calibrate --json >"$OUT/calibration.json" 2>"$OUT/calibrate_log.txt" || true
start=$(date +%s)
python3 -m solkit.cli bench --size l --out "$OUT/bench_l" 2>&1 | tee "$OUT/console.txt" | tail -n 60
rc=${PIPESTATUS[0]}
echo "bench rc=$rc wall=$(( $(date +%s) - start ))s" | tee "$OUT/wall.txt"
exit "$rc"
