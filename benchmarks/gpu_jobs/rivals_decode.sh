#!/usr/bin/env bash
# budget: 240
# Decode attention (batch 1/8/64 x KV 8k/32k/128k, paged, Llama-3-8B heads, bf16) against SDPA decode per backend
# and FlashInfer (benchmarks/rivals_decode.py -> $OUT/rivals_decode.json); the suite's redefined backward rows and
# embedding rows on every backend, quack included where importable ($OUT/bench_bwd); embedding fwd/fwd_bwd per
# backward path ($OUT/embedding); the suite's attention rows with every SDPA backend forced, the cuDNN frontend and
# FlashInfer ($OUT/bench_attention). Each part has its own time cap, so one failing or slow part does not stop the
# others (the bench checkpoints results.partial.json after every workload). The cudnn rows need
# nvidia-cudnn-frontend carried in .whl/ (installed --no-deps by run_round.sh; its nvidia-cutlass-dsl dependency is
# not needed for Hopper SDPA).
#   bash benchmarks/gpu_jobs/run_round.sh rivals_decode
set -u
export PYTHONUNBUFFERED=1
python3 -c "import cudnn; print('cudnn frontend', cudnn.__version__, 'backend', cudnn.backend_version())" \
  2>&1 | tail -n 1 | tee "$OUT/cudnn_import.txt"
timeout 70 python3 benchmarks/rivals_decode.py --out "$OUT" --parts decode,decode_sweep 2>&1 \
  | grep -v -e UserWarning -e "call = "
echo "decode rc=${PIPESTATUS[0]}"
timeout 90 python3 -m solkit.cli bench --size l --calibration quick --compile-workers 12 \
  --ops rmsnorm_bwd,layernorm_bwd,softmax_bwd,swiglu_bwd,embedding,embedding_bwd \
  --backends eager,compile,vendor,liger,solkit,quack --out "$OUT/bench_bwd" 2>&1 | tail -n 50
echo "bench bwd rc=${PIPESTATUS[0]}"
timeout 35 python3 benchmarks/rivals_decode.py --out "$OUT/embedding" --parts embedding
echo "embedding rc=$?"
timeout 45 python3 -m solkit.cli bench --size l --ops attention_causal,attention_causal_bwd --calibration quick \
  --backends vendor,sdpa_flash,sdpa_cudnn,sdpa_efficient,cudnn,flashinfer,solkit \
  --out "$OUT/bench_attention" 2>&1 | tail -n 40
echo "bench attention rc=${PIPESTATUS[0]}"
