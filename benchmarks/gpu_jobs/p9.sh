# budget: 100
# Issue 9: `solkit profile` (ncu --clock-control none + NVML) on four suite problems, then the
# raw ncu CSV in its other layouts as parser fixtures, then an NVML sampler probe if time is left.
set -u
echo "--- probe"; date -u
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
echo "ncu=$NCU"; [ -n "$NCU" ] && "$NCU" --version | tee "$OUT/ncu_version.txt"
python3 -c "import pynvml; print('pynvml', pynvml.__file__)" || echo "no pynvml"
echo "--- solkit profile: suite rmsnorm/softmax/gemm_bf16/o_proj_residual, eager reference + solkit kernels"; date -u
S=src/solkit/problems/suite; P=benchmarks/profile_solutions
T0=$(date +%s)
timeout 92 python3 -m solkit.cli profile $S/rmsnorm $S/softmax $S/gemm_bf16 $S/o_proj_residual \
  --solution $P/rmsnorm_solkit.json --solution $P/softmax_solkit.json --solution $P/gemm_bf16_solkit.json \
  --solution $P/o_proj_residual_solkit.json --workload d481fab4 --workload fd33564c --workload 7b07eb07 \
  --workload bed9fc24 --out "$OUT/profile" --timeout 60
echo "rc=$?"; date -u
if [ ! -f "$OUT/profile/profile.json" ] && [ $(( $(date +%s) - T0 )) -lt 30 ]; then
  echo "--- the CLI failed fast (another command module broken?): same run through the Python API"
  timeout 80 python3 - <<'PY'
import os
from solkit.profile.report import write_reports
from solkit.profile.runner import plan_targets, profile
S, P = "src/solkit/problems/suite", "benchmarks/profile_solutions"
names = ["rmsnorm", "softmax", "gemm_bf16", "o_proj_residual"]
targets = plan_targets([f"{S}/{n}" for n in names], [f"{P}/{n}_solkit.json" for n in names],
                       ["d481fab4", "fd33564c", "7b07eb07", "bed9fc24"])
out = os.environ["OUT"] + "/profile"
print(write_reports(profile([], targets=targets, out_dir=out, timeout_s=55), out))
PY
fi
ls -la "$OUT/profile"
tail -n 30 "$OUT/profile/ncu_output.txt" 2>/dev/null
tail -n 20 "$OUT/profile/time_log.txt" 2>/dev/null
head -c 2000 "$OUT/profile/ncu_raw.csv" 2>/dev/null; echo
REP="$OUT/profile/profile.ncu-rep"
if [ -f "$REP" ]; then
  echo "--- other CSV layouts of the same report"
  timeout 10 "$NCU" -i "$REP" --csv > "$OUT/ncu_details.csv" 2>&1
  timeout 10 "$NCU" -i "$REP" --csv --page raw > "$OUT/ncu_raw_autounits.csv" 2>&1
  timeout 10 "$NCU" -i "$REP" --csv --page raw --print-units base --print-nvtx-rename kernel > "$OUT/ncu_raw_nvtxrename.csv" 2>&1
  timeout 20 python3 - <<'PY' > "$OUT/ncu_report_check.json" 2>&1
import json, os
from solkit.profile.ncu import parse_csv, load_with_ncu_report, find_ncu
out = os.environ["OUT"]
ks = parse_csv(open(f"{out}/profile/ncu_raw.csv").read())
rep = load_with_ncu_report(f"{out}/profile/profile.ncu-rep", find_ncu())
print(json.dumps({"csv": [k.to_dict() for k in ks], "ncu_report": [k.to_dict() for k in rep]}, indent=1, default=str))
PY
  head -c 600 "$OUT/ncu_report_check.json"; echo
fi
echo "--- NVML sampler during a sustained GEMM"; date -u
timeout 15 python3 - <<'PY' > "$OUT/telemetry_probe.json" 2>&1
import json
import torch
from solkit.hardware.telemetry import TelemetrySampler, snapshot
snap = snapshot(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
with TelemetrySampler(0, keep_samples=True) as t:
    for _ in range(1500):
        a @ a
    torch.cuda.synchronize()
print(json.dumps({"snapshot_idle": snap, "gemm_8192_x1500": t.summary()}, indent=1, default=str))
PY
tail -c 700 "$OUT/telemetry_probe.json"; echo
du -sh "$OUT"; date -u
