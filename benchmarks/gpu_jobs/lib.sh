# Shell helpers shared by the GPU jobs; a job sources it: source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Needs OUT set (the job's result folder).

# run NAME SECONDS ARGS...: `solkit model ARGS --html $OUT/NAME --json` under a time limit, its JSON on
# $OUT/NAME/stdout.json and its log on $OUT/NAME/stderr.txt; the exit code and wall time go to $OUT/runs.txt and the
# log, with the last lines of its stderr (the profiler's USDT lines left out). A failing run returns, never exits.
run() {
  local name=$1 secs=$2; shift 2
  local start=$(date +%s)
  mkdir -p "$OUT/$name"
  timeout --kill-after=5 "$secs" python3 -m solkit.cli model "$@" --html "$OUT/$name" --json \
    >"$OUT/$name/stdout.json" 2>"$OUT/$name/stderr.txt"
  echo "$name rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/runs.txt"
  grep -v '^USDT' "$OUT/$name/stderr.txt" | tail -n 3
}

# left_within MAX: the seconds a part may take: MAX, or less where the job's deadline ($DEADLINE, epoch seconds, set by
# the job from its budget) leaves less, minus RESERVE seconds (default 4) for the summary after it; 0 when none left.
left_within() {
  local max=$1 left=$(( ${DEADLINE:-0} - $(date +%s) - ${RESERVE:-4} ))
  if [ -z "${DEADLINE:-}" ] || [ "$left" -gt "$max" ]; then left=$max; fi
  [ "$left" -lt 0 ] && left=0
  echo "$left"
}

# run_left NAME MAX ARGS...: run() for at most MAX seconds and within the job's deadline; skipped (and said so) when
# fewer than 10 seconds are left.
run_left() {
  local name=$1 secs; secs=$(left_within "$2"); shift 2
  if [ "$secs" -lt 10 ]; then
    echo "$name skipped: ${secs}s left of the job's budget" | tee -a "$OUT/runs.txt"
    return 0
  fi
  run "$name" "$secs" "$@"
}
