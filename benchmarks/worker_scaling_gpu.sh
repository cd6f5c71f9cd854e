#!/usr/bin/env bash
# Issue 19 on a device machine of several GPUs, as run for benchmarks/results/worker_scaling_*.json:
#   benchmarks/worker_scaling_gpu.sh OUT_DIR [python -m benchmarks.worker_scaling arguments]
# The GPU image has torch and triton but not the server side, so the call carries it
# (benchmarks/device_env.sh says what).
# Start it with setsid so it outlives the device call that starts it; OUT_DIR/run.log shows
# progress and OUT_DIR/worker_scaling.json is the result.
set -u
out=$1
shift
mkdir -p "$out"
source benchmarks/device_env.sh /tmp/kf-scaling-repo
python3 -m benchmarks.worker_scaling --out "$out/worker_scaling.json" "$@" >"$out/stdout.json" \
    2>"$out/run.log"
echo "exit $? at $(date -u +%FT%TZ)" >>"$out/run.log"
