#!/usr/bin/env bash
# budget: 240
# Prefill attention (solkit.kernels.attention): the GPU tests (bf16, head_dim 64/128, up to 8k tokens, varlen,
# both paths; two pytest processes, since Triton's compiles are CPU-bound), then
# benchmarks/gpu_jobs/attention_prefill.py on a quiet GPU: solkit against SDPA (enable_gqa; flash, cuDNN,
# efficient) at Llama-3-8B and 70B heads, causal, 1 x 8192 tokens, forward and forward+backward, then a small
# sweep of the launch settings. Copy $OUT/prefill.json to benchmarks/results/attention/<date>_h200_prefill.json.
#   bash benchmarks/gpu_jobs/run_round.sh attention_prefill
set -u
{
  echo "# attention_prefill: $(date -u +%FT%TZ)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
} 2>&1 | tee "$OUT/env.txt"
tests() {  # name, -k expression
  timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/attention/test_prefill.py -k "$2" \
    >"$OUT/gpu_tests_$1.txt" 2>&1
  echo "gpu tests $1 rc=$? $(tail -n 1 "$OUT/gpu_tests_$1.txt")"
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests_$1.txt" | head -n 6
}
tests dense "forward_backward" &
tests varlen "varlen" &
wait
timeout 140 python3 benchmarks/gpu_jobs/attention_prefill.py --out "$OUT/prefill.json" 2>&1 | tee "$OUT/prefill.txt" \
  | grep -v "^sweep\|^row"
echo "prefill rc=${PIPESTATUS[0]}"
