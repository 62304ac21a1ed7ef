#!/usr/bin/env bash
# budget: 290
# Issue 20 on the GPU: the judge against GPU attacks. Runs, with -rA -v:
#  1. tests/harness/test_judge_gpu.py in two processes at once, each with its own honest twin to compare with
#     (an 8 MB RMSNorm): (a) the persisting-L2 window, honest side-stream and Triton candidates, the in-process
#     checks (persisting L2 reset between timed calls; another thread's GPU work charged to the calls);
#     (b) memoisation by pointer/version/sampled content, work ahead on another thread, and the honest
#     launch-bound gelu_add example (eager PyTorch);
#  2. with the time left, GPU-relevant cases of the corpus (tests/harness/test_cheats.py, statuses only).
# Results: $OUT/judge_gpu.json (per candidate: expected vs measured status, latency, timing flags; per test:
# outcome and time; device, date, versions, commands), raw pytest output and junit XML beside it.
set -u
START=$(date +%s)
left() { echo $(( START + 284 - $(date +%s) )); }
{
  echo "# judge_gpu: $(date -u +%FT%TZ) tree $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader || true
  python3 -c "from solkit.harness import sandbox; print('sandbox', sandbox.probe())" || true
} 2>&1 | tee "$OUT/env.txt"
CMD1="python3 -m pytest -rA -v --tb=short -p no:cacheprovider -m gpu tests/harness/test_judge_gpu.py"
SOLKIT_JUDGE_GPU_RESULTS="$OUT/judge_gpu_rows_a.json" timeout 185 $CMD1 -k "l2 or honest_gpu or another_thread" \
  --junitxml="$OUT/junit_judge_gpu_a.xml" >"$OUT/pytest_judge_gpu_a.txt" 2>&1 &
SOLKIT_JUDGE_GPU_RESULTS="$OUT/judge_gpu_rows_b.json" timeout 185 $CMD1 -k "memo or thread_ahead or address_cache or launch_bound" \
  --junitxml="$OUT/junit_judge_gpu_b.xml" >"$OUT/pytest_judge_gpu_b.txt" 2>&1 &
wait
for s in a b; do echo "test_judge_gpu_$s: $(tail -n 1 "$OUT/pytest_judge_gpu_$s.txt")"; done
# 2. GPU-relevant corpus cases (statuses only) while time is left; -v so a shard cut short still shows each case
CMD2="python3 -m pytest -rA -v --tb=short -p no:cacheprovider tests/harness/test_cheats.py"
if [ "$(left)" -gt 20 ]; then
  T=$(( $(left) - 2 ))
  timeout $T $CMD2 -k "gpu_event or side_stream or setsid" --junitxml="$OUT/junit_cheats_a.xml" >"$OUT/pytest_cheats_a.txt" 2>&1 &
  timeout $T $CMD2 -k "correct_pytorch or background or late_write" --junitxml="$OUT/junit_cheats_b.xml" >"$OUT/pytest_cheats_b.txt" 2>&1 &
  wait
  for s in a b; do echo "cheats_$s: $(grep -cE ' PASSED' "$OUT/pytest_cheats_$s.txt") passed, $(grep -cE ' FAILED' "$OUT/pytest_cheats_$s.txt") failed"; done
fi
python3 - "$OUT" "$CMD1" "$CMD2" <<'PY'
import datetime, glob, json, os, platform, subprocess, sys
import xml.etree.ElementTree as ET
out, cmd1, cmd2 = sys.argv[1:4]
res = {"job": "benchmarks/gpu_jobs/judge_gpu.sh", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
       "commands": [cmd1 + " -k <two processes at once, SOLKIT_JUDGE_GPU_RESULTS set>", cmd2 + " -k <two shards>"]}
try:
    import torch, triton
    res["device"] = torch.cuda.get_device_name()
    res["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                       "python": platform.python_version()}
    res["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True).stdout.strip()
except Exception as exc:  # noqa: BLE001
    res["versions_error"] = repr(exc)
res["candidates"] = {}
for part in ("a", "b"):
    rows = os.path.join(out, f"judge_gpu_rows_{part}.json")
    if os.path.exists(rows):
        for k, v in json.load(open(rows)).items():
            res["candidates"][k if k not in res["candidates"] else f"{k}_{part}"] = v
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
