#!/usr/bin/env bash
# Issue 23's acceptance on a GPU: the public and unseen matmul sets timed through this checkout
# (the trust boundary) and through BASE (a checkout from before it, e.g. `git archive f951184`),
# same machine, same call, the same winners (--tuned: no search, so only the path differs).
# Sides alternate per set. Usage: BASE=.base OUT=dir bash benchmarks/trust_boundary_ab.sh
set -u
BASE=${BASE:-.base}
OUT=${OUT:-/tmp/kf-ab}
mkdir -p "$OUT"
here=$PWD
export PYTHONUNBUFFERED=1
side() {  # side <name> <dir> <set> <tuned results>
  (cd "$2" && KF_CACHE_DIR=/tmp/kf-cache-$1 timeout ${SIDE_S:-150} python3 -m benchmarks \
    --set "$3" --ops matmul --baselines torch --regimes offline --tuned "$4" \
    --out "$OUT/$3_$1.json" > "$OUT/$3_$1.log" 2>&1)
  tail -n 3 "$OUT/$3_$1.log"
}
side after "$here" public "$here/benchmarks/results/matmul_bf16_h100.json"
side before "$BASE" public "$here/benchmarks/results/matmul_bf16_h100.json"
side before "$BASE" unseen "$here/benchmarks/results/matmul_unseen_h100.json"
side after "$here" unseen "$here/benchmarks/results/matmul_unseen_h100.json"
