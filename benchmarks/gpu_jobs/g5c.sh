# budget: 120
# Issue 6 prefill, session 5 round 3 (helper g5): the table of record for the warp-specialised Gluon GEMM's
# default config (gemm_gluon.DEFAULT_CONFIG) against cuBLAS mm / addmm and the Triton kernel (gemm.py's first
# Hopper prefill autotune entry), 7 interleaved trials x 60 calls, harness 'auto', read L2 flush; then the GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/g5c_triton_cache
B=benchmarks/gemm_gluon_bench.py
echo "start $(date -u +%T)"
timeout 85 python3 $B --phase time --config default --plain default --reps 60 --trials 7 --budget-s 80 \
  --out "$OUT/gemm_gluon_h200_round3.json" 2>&1 | grep -v -i warn
echo "tests $(date -u +%T)"
timeout 30 python3 -m pytest -q -x tests/kernels/test_gemm_gluon.py 2>&1 | tail -n 5
echo "done $(date -u +%T)"
