#!/usr/bin/env bash
# qkv_rotary's fused CUTLASS kernel against its baseline (the three tensors the model's code
# makes, q and k rotated, nothing packed) at the example models' shapes, on a device machine:
#   OUT=DIR bash benchmarks/qkv_rotary_probe_gpu.sh
# Each shape's family default and the ping-pong 128x128 point the model jobs kept, compiled and
# screened by benchmarks.points_probe; writes DIR/qkv_rotary_probe_NAME.json (recorded as
# benchmarks/results/qkv_rotary_probe_NAME_<device>.json).
set -u
out=$(realpath -m "${OUT:-qkv-out}")
mkdir -p "$out"
source benchmarks/device_env.sh /tmp/kf-qkv-repo
export KF_CACHE_DIR=/tmp/kf-qkv-cache
changes='[{}, {"TILE_N": 128, "SCHEDULE": "pingpong"}]'
# name shape layout: llama_block, Qwen2-7B (q/k/v bias, 28/4 heads), GPT-J-6B (pairs, 64 of 256).
while read -r name shape layout; do
    echo "== $name qkv_rotary/$shape/bf16/$layout"
    python3 -m benchmarks.points_probe qkv_rotary "$shape" --layout "$layout" \
        --family qkv_rotary_cutlass_sm90 --changes "$changes" --deadline "${DEADLINE_S:-150}" \
        --out "$out/qkv_rotary_probe_$name.json" 2>&1 | tail -n 6
done <<'SHAPES'
llama_block 16384x16x16x64x1024 i8+kv_heads=16
qwen2 2048x28x4x128x3584 i8+bias+kv_heads=4
gptj 2048x16x16x256x4096 pairs+rot=64+head_dim=256+kv_heads=16
SHAPES
