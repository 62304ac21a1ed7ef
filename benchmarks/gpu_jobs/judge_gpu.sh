#!/usr/bin/env bash
# budget: 200
# Issue 20 on the GPU: the judge against GPU attacks. Runs, with -rA:
#  1. tests/harness/test_judge_gpu.py (one process, a quiet GPU: it compares latencies): timing attacks (L2
#     persisting window, memoisation by pointer/version/sampled content, work ahead on another thread) against
#     their honest twin on an 8 MB RMSNorm, honest side-stream and Triton candidates, and two in-process checks
#     (persisting L2 reset between timed calls; another thread's GPU work charged to the calls);
#  2. with the time left, the corpus of tests/harness/test_cheats.py on the GPU (statuses only), in 3 processes.
# Results: $OUT/judge_gpu.json (per candidate: expected vs measured status, latency, timing flags; per test:
# outcome and time; device, date, versions, commands), raw pytest output and junit XML beside it.
set -u
START=$(date +%s)
left() { echo $(( START + 170 - $(date +%s) )); }
{
  echo "# judge_gpu: $(date -u +%FT%TZ) tree $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness import sandbox; print('sandbox', sandbox.probe())" || true
} 2>&1 | tee "$OUT/env.txt"
export SOLKIT_JUDGE_GPU_RESULTS="$OUT/judge_gpu_rows.json"
CMD1="python3 -m pytest -rA -v --tb=short -p no:cacheprovider -m gpu tests/harness/test_judge_gpu.py"
timeout 110 $CMD1 --junitxml="$OUT/junit_judge_gpu.xml" >"$OUT/pytest_judge_gpu.txt" 2>&1
echo "test_judge_gpu rc=$? $(tail -n 1 "$OUT/pytest_judge_gpu.txt")"
# 2. the corpus cases that matter most on a GPU (statuses only), three shards by case name, while time is left;
#    -v so a shard cut short still shows each finished case
CMD2="python3 -m pytest -rA -v --tb=short -p no:cacheprovider tests/harness/test_cheats.py"
if [ "$(left)" -gt 25 ]; then
  T=$(( $(left) - 5 ))
  timeout $T $CMD2 -k "gpu_ or side_stream or stale" --junitxml="$OUT/junit_cheats_a.xml" >"$OUT/pytest_cheats_a.txt" 2>&1 &
  timeout $T $CMD2 -k "correct_ or setsid or late_write or background" --junitxml="$OUT/junit_cheats_b.xml" >"$OUT/pytest_cheats_b.txt" 2>&1 &
  timeout $T $CMD2 -k "memo or cache or monkey or lazy" --junitxml="$OUT/junit_cheats_c.xml" >"$OUT/pytest_cheats_c.txt" 2>&1 &
  wait
  for s in a b c; do echo "cheats_$s: $(grep -cE ' PASSED' "$OUT/pytest_cheats_$s.txt") passed, $(grep -cE ' FAILED' "$OUT/pytest_cheats_$s.txt") failed: $(tail -n 1 "$OUT/pytest_cheats_$s.txt")"; done
fi
python3 - "$OUT" "$CMD1" "$CMD2" <<'PY'
import datetime, glob, json, os, platform, subprocess, sys
import xml.etree.ElementTree as ET
out, cmd1, cmd2 = sys.argv[1:4]
res = {"job": "benchmarks/gpu_jobs/judge_gpu.sh", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
       "commands": [cmd1 + " (SOLKIT_JUDGE_GPU_RESULTS set)", cmd2 + " -k <three shards>"]}
try:
    import torch, triton
    res["device"] = torch.cuda.get_device_name()
    res["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                       "python": platform.python_version()}
    res["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True).stdout.strip()
except Exception as exc:  # noqa: BLE001
    res["versions_error"] = repr(exc)
rows = os.path.join(out, "judge_gpu_rows.json")
res["candidates"] = json.load(open(rows)) if os.path.exists(rows) else {}
tests = []
for x in sorted(glob.glob(os.path.join(out, "junit_*.xml"))):
    try:
        for tc in ET.parse(x).getroot().iter("testcase"):
            outcome, msg = "passed", ""
            for kind in ("failure", "error", "skipped"):
                el = tc.find(kind)
                if el is not None:
                    outcome, msg = kind, (el.get("message") or "")[:300]
            tests.append({"test": f"{tc.get('classname')}::{tc.get('name')}", "outcome": outcome,
                          "seconds": float(tc.get("time") or 0), "message": msg})
    except ET.ParseError as exc:
        tests.append({"file": x, "error": repr(exc)})
res["tests"] = tests
res["summary"] = {k: sum(1 for t in tests if t.get("outcome") == k) for k in ("passed", "failure", "error", "skipped")}
json.dump(res, open(os.path.join(out, "judge_gpu.json"), "w"), indent=1, default=str)
print(json.dumps(res["summary"]))
for name, r in res["candidates"].items():
    print(name, {k: r.get(k) for k in ("status", "expected", "latency_ms", "vs_twin", "foreign_ms", "seconds")} if "status" in r else r)
PY
echo "judge_gpu done in $(( $(date +%s) - START ))s"
