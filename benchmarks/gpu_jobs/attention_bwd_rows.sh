#!/usr/bin/env bash
# budget: 150
# Issue 23's redefined backward rows (each times the backward call alone on its backend's own saved forward:
# docs/bench.md): rmsnorm_bwd, layernorm_bwd, softmax_bwd, swiglu_bwd, rope_bwd at the l size (Llama-3-8B and 70B
# widths). Two benches, so the torch.compile builds cannot eat the others' time: (1) eager, vendor, liger, solkit
# and quack (where importable) with no compile workers; (2) the compile rows alone, compiled first by 12 workers.
# Copy $OUT/bwd_rows/ and $OUT/bwd_rows_compile/ to benchmarks/results/bench/<date>_h200_bwd_rows/.
#   bash benchmarks/gpu_jobs/run_round.sh attention_bwd_rows
set -u
export PYTHONUNBUFFERED=1
OPS=rmsnorm_bwd,layernorm_bwd,softmax_bwd,swiglu_bwd,rope_bwd
timeout 65 python3 -m solkit.cli bench --size l --ops $OPS --calibration quick --compile-workers 0 \
  --backends eager,vendor,liger,solkit,quack --out "$OUT/bwd_rows" 2>&1 | tail -n 45
echo "bench bwd rows rc=${PIPESTATUS[0]}"
timeout 75 python3 -m solkit.cli bench --size l --ops $OPS --calibration quick --compile-workers 12 \
  --backends compile --out "$OUT/bwd_rows_compile" 2>&1 | tail -n 25
echo "bench bwd rows compile rc=${PIPESTATUS[0]}"
