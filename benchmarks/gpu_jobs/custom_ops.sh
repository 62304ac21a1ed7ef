#!/usr/bin/env bash
# budget: 180
# solkit's kernels as custom ops on the GPU (docs/kernels/custom_ops.md):
#   bash benchmarks/gpu_jobs/run_round.sh custom_ops
# 1. the gpu-marked tests of tests/kernels/test_custom_ops.py (opcheck fp32/fp16/bf16, eager vs dispatcher,
#    the decoder layer under Inductor);
# 2. graph breaks of solkit's decoder layer under torch.compile with Inductor, fwd+bwd vs eager;
# 3. per-call host overhead of every op: launcher, public function (eager fast path), dispatcher.
# Each part runs even when another fails; results in $OUT.
set -u
{
  echo "# custom_ops: $(date -u +%FT%TZ) commit $(git rev-parse HEAD 2>/dev/null)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
} >"$OUT/custom_ops_env.txt" 2>&1
cat "$OUT/custom_ops_env.txt"
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/kernels/test_custom_ops.py \
  >"$OUT/custom_ops_tests.txt" 2>&1
echo "tests rc=$? $(tail -n 1 "$OUT/custom_ops_tests.txt")"
timeout 45 python3 benchmarks/gpu_jobs/custom_ops_compile.py --seq 512 --batch 2 --iters 10 \
  --out "$OUT/custom_ops_compile.json" \
  >"$OUT/custom_ops_compile.txt" 2>&1
echo "compile rc=$?"; tail -n 3 "$OUT/custom_ops_compile.txt"
timeout 45 python3 benchmarks/gpu_jobs/custom_ops_overhead.py --device cuda --calls 500 --warmup 50 --repeats 3 \
  --out "$OUT/custom_ops_overhead.json" \
  >"$OUT/custom_ops_overhead.txt" 2>&1
echo "overhead rc=$?"; grep -v "^ \|^{\|^}" "$OUT/custom_ops_overhead.txt" | tail -n 14
