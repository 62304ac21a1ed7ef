#!/usr/bin/env bash
# budget: 420
# Issue 22's smaller runs: Qwen2 (preset qwen2-7b) and Gemma 2 (preset gemma2-9b, final-logit softcap on) cut to
# 4 decoder layers, 2 x 2048 tokens, bf16, AdamW; 2 warm-up + 18 timed steps (a 20-step loss curve); variants
# eager, patch, liger, compile, compile+patch: loss parity and the speed-up at one smaller size. Each family has
# its own --budget, so one failing or slow family does not stop the other. Results in $OUT/train_hf_<family>/.
#   bash benchmarks/gpu_jobs/run_round.sh train_hf_small
set -u
rc=0
for spec in qwen2:qwen2-7b gemma2:gemma2-9b; do
  family=${spec%%:*}; preset=${spec##*:}
  cmd=(python3 -m solkit.cli train-bench --hf "$family" --preset "$preset" --layers 4 --batch 2 --seq 2048
       --dtype bf16 --warmup 2 --steps 18 --variants eager patch liger compile compile+patch
       --budget 200 --timeout 120 --out "$OUT/train_hf_$family")
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
