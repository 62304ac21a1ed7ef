#!/usr/bin/env bash
# budget: 420
# Issue 22's Done-means run: Hugging Face LlamaForCausalLM at Llama-3-8B shapes with 8 layers (solkit.zoo preset
# llama3-8b, random weights), 4 x 4096 tokens, bf16, AdamW; 3 warm-up + 17 timed steps (a 20-step loss curve);
# variants eager, patch, liger, compile, compile+patch, compile+liger, each in its own process, every one's
# step-0 gradients checked per parameter against eager. Results (JSON, Markdown, HTML) in $OUT/train_hf/.
#   bash benchmarks/gpu_jobs/run_round.sh train_hf
# Needs the .whl_hf wheels (transformers) and liger-kernel carried. Variants not started within --budget are
# recorded as skipped (the compile ones last: each compiles one decoder layer). To split the run over two device
# calls, keep eager in both (the loss-parity reference):
#   TRAIN_HF_VARIANTS="eager patch liger" ...  then  TRAIN_HF_VARIANTS="eager compile compile+patch compile+liger"
set -u
read -r -a variants <<<"${TRAIN_HF_VARIANTS:-eager patch liger compile compile+patch compile+liger}"
cmd=(python3 -m solkit.cli train-bench --hf llama --preset llama3-8b --layers 8 --batch 4 --seq 4096 --dtype bf16
     --warmup 3 --steps 17 --variants "${variants[@]}" --budget "${TRAIN_HF_BUDGET:-395}" --timeout 180
     --out "$OUT/train_hf")
python3 - "${cmd[*]}" >"$OUT/env.json" 2>&1 <<'PY'
import json, subprocess, sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
import torch
env = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": sys.argv[1],
       "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
for pkg in ("torch", "triton", "transformers", "liger_kernel", "solkit"):
    try:
        env[pkg] = version(pkg)
    except PackageNotFoundError:
        env[pkg] = None
env["solkit_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or None
print(json.dumps(env, indent=1))
PY
start=$(date +%s)
"${cmd[@]}" 2>&1 | tee "$OUT/console.txt" | tail -n 45
rc=${PIPESTATUS[0]}
echo "train_hf rc=$rc wall=$(( $(date +%s) - start ))s" | tee "$OUT/wall.txt"
exit "$rc"
