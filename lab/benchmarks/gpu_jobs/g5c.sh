# budget: 120
# Issue 6 prefill, session 5 round 3 (helper g5): the table of record for the warp-specialised Gluon GEMM, now
# gemm()'s default for Hopper prefill at M >= 1024 (backend "auto"): gemm_gluon.DEFAULT_CONFIG (cooperative
# 128x256x64, residual by TMA at k-step 16), gemm() through its default dispatch, the same kernel without the
# residual and two alternatives (RES_K 8; GROUP_M 16), against cuBLAS mm / addmm and the Triton kernel (gemm.py's
# first Hopper prefill autotune entry); 5 interleaved trials x 60 calls, harness 'auto', read L2 flush, every row
# checked against fp32. One untested variant (the residual's TMA load in 4 row chunks) joins the table only if
# its own check process passes first. Then the GPU tests.
set -u
export TRITON_CACHE_DIR=/tmp/g5c_triton_cache
B=lab/benchmarks/gemm_gluon_bench.py
echo "start $(date -u +%T)"
EXTRA=""
if timeout 20 python3 $B --phase check --config coopk16rs4 --out "$OUT/check_coopk16rs4.json" > "$OUT/check_coopk16rs4.log" 2>&1; then
  EXTRA=",coopk16rs4"
fi
grep -v -i warn "$OUT/check_coopk16rs4.log" | tail -n 3
echo "table $(date -u +%T) extra=${EXTRA:-none}"
timeout 56 python3 $B --phase time --config "default,coopk8,coopk16g16$EXTRA" --plain default --reps 60 \
  --trials 5 --budget-s 52 --out "$OUT/gemm_gluon_h200_round3.json" 2>&1 | grep -v -i warn
echo "tests $(date -u +%T)"
timeout 40 python3 -m pytest -q tests/kernels/test_gemm_gluon.py 2>&1 | tail -n 8
echo "done $(date -u +%T)"
