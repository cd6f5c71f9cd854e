#!/usr/bin/env bash
# The decode step's two-weight streams (swiglu_gate_weight_stream, qkv_rotary_weight_stream)
# against the whole-K dual families and the op's baseline, at llama_decode's shapes (Llama-2-7B,
# 8 rows), on a device machine:
#   OUT=DIR bash benchmarks/decode_streams_probe_gpu.sh
# First their bf16 GPU tests (correct, bit-identical call to call), then each family's starting
# points (and a few fixed splits for the streams) compiled and screened by
# benchmarks.points_probe; writes DIR/decode_streams_FAMILY.json and DIR/gpu_tests.log.
set -u
out=$(realpath -m "${OUT:-streams-out}")
mkdir -p "$out"
source benchmarks/device_env.sh /tmp/kf-streams-repo
export KF_CACHE_DIR=/tmp/kf-streams-cache
python3 -m pytest -q -p no:cacheprovider kernels/tests/test_gpu_new_variants.py \
    -k "weight_streams" >"$out/gpu_tests.log" 2>&1
tail -n 3 "$out/gpu_tests.log"
splits='[{}, {"SPLIT_K": 2}, {"SPLIT_K": 4}, {"SPLIT_K": 8}]'
while read -r op family shape layout; do
    echo "== $family $shape ${layout:-(no layout)}"
    changes='[{}]'
    [[ $family == *_weight_stream ]] && changes=$splits
    python3 -m benchmarks.points_probe "$op" "$shape" --layout "$layout" \
        --family "$family" --starting --changes "$changes" --deadline "${DEADLINE_S:-150}" \
        --out "$out/decode_streams_$family.json" 2>&1 | tail -n 12
done <<'POINTS'
swiglu_gate swiglu_gate_weight_stream 8x11008x4096 i8+rowscale
swiglu_gate swiglu_gate_dual 8x11008x4096 i8+rowscale
qkv_rotary qkv_rotary_weight_stream 8x32x32x128x4096
qkv_rotary qkv_rotary_dual 8x32x32x128x4096
POINTS
