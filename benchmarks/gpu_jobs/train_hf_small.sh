#!/usr/bin/env bash
# budget: 200
# Issue 22's smaller runs: Qwen2 (preset qwen2-7b) and Gemma 2 (preset gemma2-9b, final-logit softcap on) cut to
# 2 decoder layers, 2 x 2048 tokens, bf16, AdamW; 2 warm-up + 10 timed steps; variants eager, patch, compile,
# compile+patch: loss parity and the speed-up at one smaller size. Each family has its own --budget, so one failing
# or slow family does not stop the other. Results in $OUT/train_hf_<family>/. First (a few seconds) it records
# which SDPA backend PyTorch picks by default for Llama-3-8B's bf16 causal GQA call on this device, the cuDNN
# version, and the backend order solkit.patch's attention swap asks for: $OUT/sdpa_default.json.
#   bash benchmarks/gpu_jobs/run_round.sh train_hf_small
set -u
rc=0
timeout 60 python3 - >"$OUT/sdpa_default.json" 2>"$OUT/sdpa_default.err" <<'PY' || echo "sdpa probe failed: $(tail -n 1 "$OUT/sdpa_default.err")"
import json
from datetime import datetime, timezone

import torch
from torch.nn.attention import SDPBackend

from solkit.swap import settings

q = torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16)
kv = torch.randn(4, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)  # settles torch's order
choice = torch._fused_sdp_choice(q, kv, kv, is_causal=True, enable_gqa=True)
doc = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": torch.cuda.get_device_name(),
       "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
       "call": "q [4, 32, 4096, 128], k/v [4, 8, 4096, 128], bf16, is_causal, enable_gqa (HF Llama-3-8B, 4 x 4096)",
       "default_backend": SDPBackend(choice).name,
       "default_priority": [SDPBackend(b).name for b in torch._C._get_sdp_priority_order()],
       "solkit_patch_priority": [b.name for b in settings.sdpa_priority()]}
print(json.dumps(doc, indent=1))
PY
cat "$OUT/sdpa_default.json"
for spec in qwen2:qwen2-7b gemma2:gemma2-9b; do
  family=${spec%%:*}; preset=${spec##*:}
  cmd=(python3 -m solkit.cli train-bench --hf "$family" --preset "$preset" --layers 2 --batch 2 --seq 2048
       --dtype bf16 --warmup 2 --steps 10 --variants eager patch compile compile+patch
       --budget 85 --timeout 80 --out "$OUT/train_hf_$family")
  echo "=== ${cmd[*]}"
  start=$(date +%s)
  "${cmd[@]}" >"$OUT/console_$family.txt" 2>&1
  r=$?
  tail -n 30 "$OUT/console_$family.txt"
  echo "$family rc=$r wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/wall.txt"
  [ "$r" -eq 0 ] || rc=$r
done
python3 -c "import json, sys, torch, transformers; json.dump({'device': torch.cuda.get_device_name(), \
'torch': torch.__version__, 'transformers': transformers.__version__}, sys.stdout)" >"$OUT/env.json" 2>/dev/null || true
exit "$rc"
