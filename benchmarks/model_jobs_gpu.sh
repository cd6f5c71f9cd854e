#!/usr/bin/env bash
# Issue 25 on a device machine: model jobs one after another, as run for
# benchmarks/results/model_*_h200*.json:
#   benchmarks/model_jobs_gpu.sh OUT_DIR BUDGET_S MODEL [MODEL ...]   (MODEL: examples/models/NAME.py)
# The call carries what the GPU image lacks (benchmarks/device_env.sh says what). Start it with
# setsid so it outlives the device call that starts it; OUT_DIR/log.log shows progress and ends
# with an "exit" line; each model's JSON (recorded as model_NAME) and log are beside it. On a
# machine of several GPUs, one chain per GPU (CUDA_VISIBLE_DEVICES=i, an OUT_DIR each) runs
# side by side: each goes on in its own copy of the checkout.
set -u
out=$(realpath -m "$1") budget=$2
shift 2
mkdir -p "$out"
source benchmarks/device_env.sh "/tmp/kf-model-repo-$(basename "$out")"
export KF_CACHE_DIR=${KF_CACHE_DIR:-/tmp/kf-machine}
for name in "$@"; do
    echo "model $name started $(date -u +%FT%TZ)" >>"$out/log.log"
    python3 -m benchmarks.model_job "examples/models/$name.py" --budget "$budget" \
        --compile-threads 8 --record "model_$name" --out "$out/model_$name.json" \
        >"$out/$name.log" 2>&1
    echo "model $name rc $? $(date -u +%FT%TZ)" >>"$out/log.log"
done
echo "exit 0 at $(date -u +%FT%TZ)" >>"$out/log.log"
