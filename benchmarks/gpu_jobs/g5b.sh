# budget: 150
# Issue 6 prefill, session 5 round 2 (helper g5): the warp-specialised Gluon GEMM (src/solkit/kernels/gemm_gluon.py).
# Round 1: the cooperative kernel (8 consumer warps, 128x256x64) is correct and, without the residual, level with
# cuBLAS; with the residual loaded right after the previous store it lost 5 us per tile waiting for that store;
# loaded at k-step 2 it was +3.9 / +4.9 % over cuBLAS mm. Ping-pong crashed once a consumer had several tiles.
# 1) in parallel: GPU tests of the adopted configs; ping-pong bisect cases, one process each (40 s cap)
# 2) compute-sanitizer on the smallest failing ping-pong case, if the device has it
# 3) timing: RES_K 4/8/16/32 and GROUP_M 16 against cuBLAS mm/addmm and the Triton kernel, 5 interleaved trials
set -u
export TRITON_CACHE_DIR=/tmp/g5b_triton_cache
B=benchmarks/gemm_gluon_bench.py
echo "start $(date -u +%T)"
timeout 60 python3 -m pytest -q -x tests/kernels/test_gemm_gluon.py > "$OUT/pytest_gpu.txt" 2>&1 &
for spec in pp128:multi_res pp128:multi_nores pp128:multi_bias pp128r192:multi_res pp64x256:multi_nores; do
  c=${spec%%:*}; k=${spec##*:}
  timeout 40 python3 $B --phase check --config "$c" --cases "$k" --out "$OUT/bisect_${c}_${k}.json" \
    > "$OUT/bisect_${c}_${k}.log" 2>&1 &
done
wait
echo "parallel stage done $(date -u +%T)"
tail -n 5 "$OUT/pytest_gpu.txt"
for f in "$OUT"/bisect_*.log; do
  echo "----- $(basename "$f")"; grep -v -i "warn" "$f" | grep -v "^  File\|^    \|^Search\|^CUDA kernel\|^For debug\|^Compile with" | tail -n 8
done
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
echo "compute-sanitizer: ${CS:-none}"
if [ -n "$CS" ]; then
  timeout 30 "$CS" --tool memcheck --print-limit 4 python3 $B --phase check --config pp128 --cases multi_nores \
    --out "$OUT/sanitizer_pp128.json" > "$OUT/sanitizer_pp128.log" 2>&1
  grep -v -i "warn" "$OUT/sanitizer_pp128.log" | head -n 60
fi
echo "timing $(date -u +%T)"
timeout 70 python3 $B --phase time --config coopk16,coopk4,coopk8,coopk32,coopk16g16,coopk16e,coopk32e --plain coopk16 \
  --reps 50 --trials 5 --budget-s 64 --out "$OUT/gemm_gluon_h200_round2.json" 2>&1 | grep -v -i warn
echo "done $(date -u +%T)"
