# budget: 90
# Session 6 (lead), review pass: the decode benchmarks after their shared helpers moved into gemm_decode_sweep
# (decode_inputs, references, cublas_baselines, check_variants, record_spans): a smoke run of each on the GPU.
set -u
export TRITON_CACHE_DIR=/tmp/l14_triton
date -u
cd benchmarks
timeout 75 python3 gemm_decode_gluon.py --plan smoke --m 1 16 --k 4096 --default-path --reps 10 --budget-s 65 \
  --out "$OUT/gluon_smoke.json" 2>&1 | tail -n 25 | tee "$OUT/gluon_smoke.txt"
date -u
