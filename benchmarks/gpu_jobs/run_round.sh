#!/usr/bin/env bash
# Runs GPU jobs back to back on the lent device, one tarball of results per job under $OUT.
#
#   bash benchmarks/gpu_jobs/run_round.sh JOB[:SECONDS] [JOB[:SECONDS] ...]
#
# Each job is benchmarks/gpu_jobs/JOB.sh (the maintained jobs), else lab/benchmarks/gpu_jobs/JOB.sh (the dated
# per-round record; those need not run any more). It runs from the repo root with OUT set to its own
# folder, and must finish within the budget (seconds) on its "# budget: N" line (default 60; the
# wrapper kills it past that). Wheels in .whl*/ (the sets carried) go into /tmp/site first.
set -u
ROOT=$(pwd)
FINAL_OUT=${OUT:?OUT must be set}
# The wheels come in sets that are carried only when a job needs them (the carry limit is 64 MiB): .whl (core),
# .whl_plot (matplotlib and what it imports), .whl_hf (transformers and what it imports), .whl_ray (ray, slimmed by
# tools/slim_wheel.py --preset ray, and what it imports).
for set in .whl .whl_plot .whl_hf .whl_ray; do
  if ls "$set"/*.whl >/dev/null 2>&1 && [ ! -f "/tmp/site/.installed$set" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$set"/*.whl \
      && touch "/tmp/site/.installed$set"
  fi
done
export PYTHONPATH=$ROOT/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader || true
for spec in "$@"; do
  # JOB or JOB:SECONDS (a cap below the script's own budget, to fit the session's device time)
  job=${spec%%:*}
  script=benchmarks/gpu_jobs/$job.sh
  [ -f "$script" ] || script=lab/benchmarks/gpu_jobs/$job.sh
  budget=$(grep -m1 -oP '^# budget:\s*\K[0-9]+' "$script" 2>/dev/null || echo 60)
  if [ "$spec" != "$job" ] && [ "${spec##*:}" -lt "$budget" ]; then budget=${spec##*:}; fi
  work=/tmp/jobout/$job
  rm -rf "$work"; mkdir -p "$work"
  start=$(date +%s)
  echo "=== $job (budget ${budget}s) ==="
  OUT=$work BUDGET=$budget timeout --kill-after=10 "$budget" bash "$script" >"$work/log.txt" 2>&1
  rc=$?
  echo "rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$work/log.txt"
  tail -n 15 "$work/log.txt"
  tar -czf "$FINAL_OUT/$job.tgz" -C /tmp/jobout "$job"
done
