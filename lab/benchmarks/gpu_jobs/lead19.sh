# budget: 60
# Session 7: the first-timed-row artefact, sequence form: after a 1024x262144 timing, 8192x4096 timed four times in
# a row with the addresses of inputs and graph-allocated outputs (lab/benchmarks/warmup_probe.py --sequence).
set -u
cd benchmarks
timeout 55 python3 warmup_probe.py --sequence --trials 3 --out "$OUT/warmup_sequence.json" 2>&1 | tail -n 20
