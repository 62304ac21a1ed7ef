#!/usr/bin/env bash
set -u
OUT=$1; ROUNDS=$2; shift 2
OPS=add_rmsnorm,attention_causal,cross_entropy,geglu,layernorm,layernorm_bwd,rmsnorm,rmsnorm_bwd,rope,rope_bwd,softmax,softmax_bwd,swiglu,swiglu_bwd
PLAN=(--size s --backends eager,vendor --calibration quick --json --ops "$OPS")
export SOLKIT_CACHE_DIR=/tmp/h25/cache RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
mkdir -p $OUT
for r in $(seq 1 $ROUNDS); do
 for m in "$@"; do
  pp=""
  case $m in serial) a=(--device cpu);; local|localB) a=(--devices cpu:1);; ray|rayB) a=(--ray auto --devices cpu:1);; esac
  case $m in *B) pp=/tmp/h25/before/src;; esac
  rm -rf $OUT/${m}_$r
  s=$(date +%s.%N)
  PYTHONPATH=$pp python3 -m solkit.cli bench "${PLAN[@]}" --out $OUT/${m}_$r "${a[@]}" >/dev/null 2>$OUT/${m}_$r.err
  e=$(date +%s.%N)
  echo "$s $e" > $OUT/${m}_$r.wall
 done
done
