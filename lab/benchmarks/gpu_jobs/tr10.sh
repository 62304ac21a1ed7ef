# budget: 120
# Issue 10: end-to-end training step of llama3-8b-L8 (bf16, batch 4 x seq 4096 = 16k tokens/step)
# per variant, each in a fresh process: tokens/s, MFU, peak memory, loss parity vs eager.
# Eager first (the parity reference), then the variants the goals compare; --budget records as
# "skipped" whatever does not fit (round 1 measured all six in 130 s; the round-2 cap is 120 s).
set -u
cd "$(dirname "$0")/../.."
echo "tr10 start $(date -u +%H:%M:%S)"
timeout 116 python3 -m solkit.train.cli --config llama3-8b-L8 \
  --variants eager solkit compile+solkit compile flce liger \
  --steps 8 --warmup 3 --budget 111 --timeout 60 --out "$OUT"
echo "tr10 rc=$? end $(date -u +%H:%M:%S)"
