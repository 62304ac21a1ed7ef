# budget: 90
# Session 7: does the harness's time-based warm-up (timing.WARMUP_MS) remove the first-timed-row artefact?
# lab/benchmarks/warmup_probe.py at 8192x4096 and 1024x262144, warm-up 0 / 50 / 200 ms, 3 trials.
set -u
cd benchmarks
timeout 80 python3 warmup_probe.py --out "$OUT/warmup_probe.json" --trials 3 2>&1 | tail -n 40
