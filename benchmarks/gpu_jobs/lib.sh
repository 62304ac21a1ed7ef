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
