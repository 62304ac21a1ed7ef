# budget: 30
# Issue 9, round 2 (cap 30 s; round 1 ran `solkit profile` on the suite: benchmarks/results/profile/2026-11-30_h200_example).
# 1) the `solkit bench --profile` hook: diagnose_for_bench with the caller's T_measured (ncu-only path),
#    and whether NVIDIA's ncu_report module reads the report; 2) the no-ncu degraded path on a GPU
#    (also the interleaved A B B A timing of a reference and a solution).
set -u
S=src/solkit/problems/suite; P=benchmarks/profile_solutions
echo "--- diagnose_for_bench (ncu only, caller's time)"; date -u
timeout 15 python3 - <<'PY' > "$OUT/bench_hook.json" 2> "$OUT/bench_hook.err"
import json, os
from solkit.profile import ncu
from solkit.profile.bench_hook import diagnose_for_bench
out = os.environ["OUT"] + "/bench_hook"
d = diagnose_for_bench("src/solkit/problems/suite/rmsnorm", solution="benchmarks/profile_solutions/rmsnorm_solkit.json",
                       workload="d481fab4", t_measured_ms=0.0360, out_dir=out, timeout_s=12)
rep = ncu.load_with_ncu_report(out + "/profile.ncu-rep", ncu.find_ncu())
d["ncu_report_module"] = {"kernels": [k.to_dict() for k in rep], "status": ncu.NCU_REPORT_STATUS["error"] or "ok"}
print(json.dumps(d, indent=1, default=str))
PY
echo "rc=$?"; rm -f "$OUT"/bench_hook/*.ncu-rep; head -c 1500 "$OUT/bench_hook.json"; echo; tail -3 "$OUT/bench_hook.err"
echo "--- no ncu on a GPU: degraded report, exit 0"; date -u
SOLKIT_NCU=/nonexistent/ncu timeout 13 python3 -m solkit.cli profile $S/rmsnorm --solution $P/rmsnorm_solkit.json \
  --workload c2de4d14 --out "$OUT/no_ncu" --timeout 10 > "$OUT/no_ncu.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/no_ncu.txt"; tail -n 12 "$OUT/no_ncu.txt"
du -sh "$OUT"; date -u
