#!/usr/bin/env bash
# Issue 23's acceptance on a GPU: the public and unseen matmul sets timed through this checkout
# (the trust boundary) and through BASE (a checkout from before it, e.g. `git archive f951184`),
# same machine, same call, the same winners (--tuned: no search, so only the path differs).
# Sides alternate per set and repeat (repeats START..REPEATS, default 1..1; SETS, default
# "public unseen"; START lets one series span several device calls).
# Usage: BASE=.base OUT=dir bash benchmarks/trust_boundary_ab.sh; then
# python -m benchmarks.ab_ratios dir --out benchmarks/results/<name>.json
set -u
BASE=${BASE:-.base}
OUT=${OUT:-/tmp/kf-ab}
mkdir -p "$OUT"
here=$PWD
export PYTHONUNBUFFERED=1
side() {  # side <name> <dir> <set> <repeat>
  local tuned=$here/benchmarks/results/matmul_bf16_h100.json tag=$3_$1
  [ "$3" = unseen ] && tuned=$here/benchmarks/results/matmul_unseen_h100.json
  [ "$4" != 1 ] && tag=$3_$1_$4
  (cd "$2" && KF_CACHE_DIR=/tmp/kf-cache-$1 timeout ${SIDE_S:-150} python3 -m benchmarks \
    --set "$3" --ops matmul --baselines torch --regimes offline --tuned "$tuned" \
    --out "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1)
  tail -n 3 "$OUT/$tag.log"
}
for i in $(seq "${START:-1}" "${REPEATS:-1}"); do
  for set in ${SETS:-public unseen}; do
    if [ $((i % 2)) = 1 ]; then first=after; else first=before; fi
    for who in $first $([ $first = after ] && echo before || echo after); do
      dir=$here; [ "$who" = before ] && dir=$BASE
      side "$who" "$dir" "$set" "$i"
    done
  done
done
