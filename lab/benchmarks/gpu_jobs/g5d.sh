# budget: 150
# Issue 6 prefill, session 5 round 4 (lead): the table of record with the final default (gemm()'s "auto" backend:
# the warp-specialised Gluon kernel, RES_SPLIT 4, for Hopper prefill at M >= 1024), re-measured after the
# helper's round 3 (where RES_SPLIT 4 was a variant, not yet the default): lab/benchmarks/gemm_oproj.py's table at the
# four prefill shapes (cuBLAS mm, mm-then-add, addmm, solkit fused through gemm(), solkit without the residual,
# torch.compile at the seed's shape), harness 'auto' (CUDA events per call), read L2 flush, 7 interleaved
# trials x 60 calls; then the gemm()-default check and GPU tests of both GEMM paths.
set -u
export TRITON_CACHE_DIR=/tmp/g5d_triton_cache
echo "start $(date -u +%T)"
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
timeout 95 python3 lab/benchmarks/gemm_oproj.py --precompile 8 --precompile-timeout-s 25 --compile-seed-only \
  --compile-reserve-s 25 --no-decode --with-plain --reps 60 --trials 7 --budget-s 88 \
  --out "$OUT/gemm_oproj_h200_session5_prefill.json" 2>&1 | grep -v -i warn | tee "$OUT/bench.txt"
echo "bench rc=${PIPESTATUS[0]} $(date -u +%T)"
timeout 45 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gemm_gluon.py tests/kernels/test_gemm.py \
  2>&1 | tail -n 6 | tee "$OUT/gpu_tests.txt"
echo "done $(date -u +%T)"
