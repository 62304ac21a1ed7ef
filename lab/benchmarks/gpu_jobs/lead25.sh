# budget: 80
# Session 7: what makes a shape's first timed row slow (lab/benchmarks/first_row_probe.py).
set -u
cd benchmarks
timeout 75 python3 first_row_probe.py --out "$OUT/first_row_probe.json" 2>&1 | tail -n 20
