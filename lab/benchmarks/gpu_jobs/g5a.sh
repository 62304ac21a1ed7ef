# budget: 150
# Issue 6 prefill, session 5 round 1 (helper g5): the warp-specialised Gluon GEMM (src/solkit/kernels/gemm/gluon.py).
# 1) compile + correctness per config, one process each, in parallel (a deadlocked config only loses its own
#    process; compile errors are printed in full); 2) the configs that passed timed at the four prefill shapes
#    against cuBLAS mm / addmm and the Triton kernel (harness 'auto', read L2 flush, interleaved trials).
set -u
export TRITON_CACHE_DIR=/tmp/g5_triton_cache
echo "start $(date -u +%T)"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
CONFIGS="pp128 pp128s5 pp128g16 pp128k2 pp64x256 coop coopg16 coopk2"
for c in $CONFIGS; do
  timeout 55 python3 lab/benchmarks/gemm_gluon_bench.py --phase check --config "$c" --out "$OUT/check_$c.json" \
    > "$OUT/check_$c.log" 2>&1 &
done
wait
echo "checks done $(date -u +%T)"
for c in $CONFIGS; do echo "----- check $c"; grep -v -i "warn" "$OUT/check_$c.log" | tail -c 6000; done
PASSED=$(python3 - "$OUT" $CONFIGS <<'PY'
import json, sys, os
out, names = sys.argv[1], sys.argv[2:]
ok = []
for n in names:
    p = os.path.join(out, f"check_{n}.json")
    try:
        d = json.load(open(p))
        if d["results"][n].get("correct") and len(d["results"][n]["cases"]) >= 7:
            ok.append(n)
    except Exception as e:
        print(f"{n}: {e}", file=sys.stderr)
print(",".join(ok))
PY
)
echo "passed: $PASSED"
if [ -n "$PASSED" ]; then
  timeout 85 python3 lab/benchmarks/gemm_gluon_bench.py --phase time --config "$PASSED" --plain pp128,coop --reps 40 --trials 3 \
    --budget-s 78 --out "$OUT/gemm_gluon_h200_round1.json" 2>&1 | grep -v -i warn
fi
echo "done $(date -u +%T)"
