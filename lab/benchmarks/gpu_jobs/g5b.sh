# budget: 150
# Issue 6 prefill, session 5 round 2 (helper g5): the warp-specialised Gluon GEMM (src/solkit/kernels/gemm/gluon.py).
# Round 1: the cooperative kernel (8 consumer warps, 128x256x64) is correct and, without the residual, level with
# cuBLAS; with the residual loaded right after the previous store it lost 5 us per tile waiting for that store;
# loaded at k-step 2 it was +3.9 / +4.9 % over cuBLAS mm. Ping-pong crashed once a consumer had several tiles
# (diagnosis: the second consumer waited on ring slots many laps ahead; fixed by making the main loops take turns).
# 1) in parallel: GPU tests of the adopted configs; checks of the fixed ping-pong configs, one process each
# 2) compute-sanitizer on ping-pong if it still fails and the device has the tool
# 3) timing: cooperative RES_K 4/8/16/32, GROUP_M 16, RES_EARLY, and the ping-pong configs that passed, against
#    cuBLAS mm/addmm and the Triton kernel (harness 'auto', read L2 flush, 4 interleaved trials)
set -u
export TRITON_CACHE_DIR=/tmp/g5b_triton_cache
B=lab/benchmarks/gemm_gluon_bench.py
echo "start $(date -u +%T)"
timeout 50 python3 -m pytest -q -x tests/kernels/test_gemm_gluon.py > "$OUT/pytest_gpu.txt" 2>&1 &
PP="pp128 pp128e pp128k32 pp64x256"
for c in $PP; do
  timeout 45 python3 $B --phase check --config "$c" --out "$OUT/check_$c.json" > "$OUT/check_$c.log" 2>&1 &
done
wait
echo "parallel stage done $(date -u +%T)"
tail -n 5 "$OUT/pytest_gpu.txt"
for c in $PP; do
  echo "----- check $c"; grep -v -i "warn" "$OUT/check_$c.log" | grep -v "^  File\|^    \|^Search\|^CUDA kernel\|^For debug\|^Compile with" | tail -n 6
done
PASSED=$(python3 - "$OUT" $PP <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
ok = []
for n in names:
    try:
        if json.load(open(os.path.join(out, f"check_{n}.json")))["results"][n].get("correct"):
            ok.append(n)
    except Exception as e:
        print(f"{n}: {e}", file=sys.stderr)
print(",".join(ok))
PY
)
echo "ping-pong passed: ${PASSED:-none}"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
if [ -z "$PASSED" ] && [ -n "$CS" ]; then
  timeout 20 "$CS" --tool memcheck --print-limit 4 python3 $B --phase check --config pp128 --cases multi_nores \
    --out "$OUT/sanitizer_pp128.json" > "$OUT/sanitizer_pp128.log" 2>&1
  grep -v -i "warn" "$OUT/sanitizer_pp128.log" | head -n 50
fi
echo "timing $(date -u +%T)"
CFG=coopk16,coopk4,coopk8,coopk32,coopk16g16,coopk16e${PASSED:+,$PASSED}
timeout 75 python3 $B --phase time --config "$CFG" --plain coopk16${PASSED:+,${PASSED%%,*}} \
  --reps 40 --trials 4 --budget-s 70 --out "$OUT/gemm_gluon_h200_round2.json" 2>&1 | grep -v -i warn
echo "done $(date -u +%T)"
