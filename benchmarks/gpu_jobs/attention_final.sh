#!/usr/bin/env bash
# budget: 100
# Issue 23's last prefill-attention measurements, in one short call. (1) The lab's Gluon forward
# (lab/kernels/attention_gluon.py: two consumer warpgroups fed by a TMA loader warp; plain, FlashAttention-3's
# intra-warpgroup overlap, ping-pong turns) at Llama-3-8B and 70B heads, causal, 8192 tokens, checked against fp32,
# capped at 38 s so that a hang cannot eat the rest (-> $OUT/attention_gluon.json). (2) benchmarks/gpu_jobs/
# attention_prefill.py without its sweep: solkit's tuned forward (configs.yaml sm_90: 128x64, 4 warps, 2 stages)
# and forward+backward (7-GEMM default and the 5-GEMM atomic-dQ backward) on both paths against SDPA flash / cuDNN
# / efficient, same shapes, all in this run, and the Gluon forward with solkit's backward when a Gluon variant was
# correct at both shapes (-> $OUT/prefill.json). Copy both to benchmarks/results/attention/.
#   bash benchmarks/gpu_jobs/run_round.sh attention_final
set -u
export TRITON_CACHE_DIR=/tmp/triton_attn_final PYTHONUNBUFFERED=1
{
  echo "# attention_final: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
} 2>&1 | tee "$OUT/env.txt"
timeout 38 python3 lab/benchmarks/attention_sweep.py --part gluon --deadline 31 --out "$OUT/attention_gluon.json" \
  2>&1 | grep -v -e UserWarning -e "^  " | tee "$OUT/gluon.txt" | grep -e "^\[.*\] gluon" | cut -c1-260
echo "gluon rc=${PIPESTATUS[0]}"
# the fastest Gluon variant that was correct at both shapes, if any, joins the comparison with solkit's backward
GLUON=$(python3 - "$OUT/attention_gluon.json" <<'PY' 2>/dev/null
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r.get("correct") and "ms" in r]
ok = [r for r in rows if r["shape"] == "llama3-8b"
      and any(o["shape"] == "llama3-70b" and o["fwd"] == r["fwd"] for o in rows)]
print(json.dumps(min(ok, key=lambda r: r["ms"])["fwd"]) if ok else "")
PY
)
echo "gluon variant for fwd+bwd: ${GLUON:-none}"
timeout 56 python3 benchmarks/gpu_jobs/attention_prefill.py --skip-sweep --out "$OUT/prefill.json" \
  ${GLUON:+--gluon "$GLUON"} 2>&1 | tee "$OUT/prefill.txt" | grep -v "^row"
echo "prefill rc=${PIPESTATUS[0]}"
