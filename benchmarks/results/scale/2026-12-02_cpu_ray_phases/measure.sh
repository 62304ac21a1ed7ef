#!/usr/bin/env bash
# bash measure.sh before_after OUTDIR BEFORE_SRC ROUNDS: `solkit bench --ray auto --devices cpu:1` with the code at
#   BEFORE_SRC (a tree's src/ on PYTHONPATH) and the present code, alternated run by run, each on a fresh one-node
#   cluster with one CPU (so the actor runs torch on one thread) whose workers import that run's tree.
# bash measure.sh three_paths OUTDIR ROUNDS: serial, --ray auto --devices cpu:1 and --devices cpu:1 alternated, on one
#   one-node cluster with two CPUs.
# Every cluster is `ray start --head` on the loopback, warmed with one task, as benchmarks/gpu_jobs/scale_ray.sh
# starts it. Each run writes OUTDIR/NAME/ (the bench's results), NAME.rc and NAME.wall (start, end, 1-min load).
set -u
MODE=$1; OUT=$2
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
OPS=add_rmsnorm,attention_causal,cross_entropy,geglu,layernorm,layernorm_bwd,rmsnorm,rmsnorm_bwd,rope,rope_bwd,softmax,softmax_bwd,swiglu,swiglu_bwd
PLAN=(--size s --backends eager,vendor --calibration quick --json --ops "$OPS")
mkdir -p "$OUT"
one() {  # one NAME PYTHONPATH ARGS...
  local name=$1 pp=$2; shift 2
  local s e
  rm -rf "$OUT/$name"
  s=$(date +%s.%N)
  PYTHONPATH=$pp python3 -m solkit.cli bench "${PLAN[@]}" --out "$OUT/$name" "$@" >/dev/null 2>"$OUT/$name.stderr"
  echo "rc=$?" >"$OUT/$name.rc"
  e=$(date +%s.%N)
  echo "$s $e $(cut -d' ' -f1 /proc/loadavg)" >"$OUT/$name.wall"
}
cluster() {  # cluster PYTHONPATH CPUS
  ray stop >/dev/null 2>&1
  PYTHONPATH=$1 ray start --head --node-ip-address=127.0.0.1 --port=6399 --num-cpus="$2" \
    --object-store-memory=500000000 --include-dashboard=false --disable-usage-stats >/dev/null 2>&1
  PYTHONPATH=$1 python3 -c "import ray; ray.init(address='auto', log_to_driver=False); ray.get(ray.remote(lambda: 1).remote())" 2>/dev/null
}
case $MODE in
  before_after)
    BEFORE=$3; ROUNDS=$4
    for r in $(seq 1 "$ROUNDS"); do
      for variant in before after; do
        if [ $variant = before ]; then pp=$BEFORE; else pp=""; fi
        cluster "$pp" 1
        one "ray_${variant}_$r" "$pp" --ray auto --devices cpu:1
      done
    done ;;
  three_paths)
    ROUNDS=$3
    cluster "" 2
    for r in $(seq 1 "$ROUNDS"); do
      one "serial_$r" "" --device cpu
      one "ray_after_$r" "" --ray auto --devices cpu:1
      one "local_$r" "" --devices cpu:1
    done ;;
  *) echo "measure.sh: MODE must be before_after or three_paths" >&2; exit 2 ;;
esac
ray stop >/dev/null 2>&1
