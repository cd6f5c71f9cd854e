#!/usr/bin/env bash
# Issue 24 on a device machine, as run for benchmarks/results/both_ways_*.json:
#   benchmarks/both_ways_gpu.sh OUT_DIR [python -m benchmarks.both_ways arguments, less --out]
# The call carries what the GPU image lacks (benchmarks/device_env.sh says what). Start it with
# setsid so it outlives the device call that starts it; OUT_DIR/log.log shows progress (each
# run's own log is beside it) and OUT_DIR/both_ways.json is the result, written after every run.
# A library built on a CPU box with the image's nvcc (`python -m harness.library build`, then
# `pack .kf-library/bf16_nn.tar.xz`) costs no device time for nvcc. The tracked tree with all
# of .whl/ is over one call's 64 MiB carry (2026-12-08), so a first call carries .kf-library
# and .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl and copies both to /tmp; the next, at once,
# carries .whl/site312.tar.xz and .sandbox-bin, copies the wheel back into .whl/ and runs this
# with `--library-archive /tmp/bf16_nn.tar.xz --build-minutes 0`.
set -u
out=$1
shift
mkdir -p "$out"
source benchmarks/device_env.sh /tmp/kf-both-repo
python3 -m benchmarks.both_ways --out "$out" "$@" >>"$out/log.log" 2>&1
echo "exit $? at $(date -u +%FT%TZ)" >>"$out/log.log"
