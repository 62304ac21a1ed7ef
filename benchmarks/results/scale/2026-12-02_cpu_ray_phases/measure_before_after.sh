#!/usr/bin/env bash
# bash measure5.sh OUTDIR BEFORE_SRC ROUNDS: `solkit bench --ray auto --devices cpu:1` with the code before and after,
# alternated run by run, each on a fresh one-node cluster (ray start --head --num-cpus=1, warmed with one task) whose
# workers import that run's tree (PYTHONPATH); one CPU for the actor, so both run torch on one thread.
set -u
OUT=$1; BEFORE=$2; ROUNDS=$3
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
cluster() {
  ray stop >/dev/null 2>&1
  PYTHONPATH=$1 ray start --head --node-ip-address=127.0.0.1 --port=6399 --num-cpus=1 --object-store-memory=500000000 \
    --include-dashboard=false --disable-usage-stats >/dev/null 2>&1
  PYTHONPATH=$1 python3 -c "import ray; ray.init(address='auto', log_to_driver=False); ray.get(ray.remote(lambda: 1).remote())" 2>/dev/null
}
for r in $(seq 1 "$ROUNDS"); do
  for variant in before after; do
    if [ $variant = before ]; then pp=$BEFORE; else pp=""; fi
    cluster "$pp"
    one "ray_${variant}_$r" "$pp" --ray auto --devices cpu:1
  done
done
ray stop >/dev/null 2>&1
