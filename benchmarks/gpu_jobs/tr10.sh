# budget: 240
# Issue 10: end-to-end training step of llama3-8b-L8 (bf16, batch 4 x seq 4096 = 16k tokens/step)
# per variant, each in a fresh process: tokens/s, MFU, peak memory, loss parity vs eager.
# Order puts the variants the goals need first; --budget skips (and records) what does not fit.
set -u
cd "$(dirname "$0")/../.."
echo "tr10 start $(date -u +%H:%M:%S)"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
timeout 226 python3 -m solkit.train.cli --config llama3-8b-L8 \
  --variants eager solkit compile+solkit compile flce liger \
  --steps 8 --warmup 3 --budget 218 --timeout 100 --out "$OUT"
echo "tr10 rc=$? end $(date -u +%H:%M:%S)"
ls -la "$OUT"
