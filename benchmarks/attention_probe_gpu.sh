#!/usr/bin/env bash
# Issue 25 item 2 on a device machine: is attention_flash faster than SDPA's flash kernel at the
# example models' prefill shapes? Runs the prefill GPU test, then benchmarks.points_probe (every
# point compiled and screened against the op's baseline, SDPA with enable_gqa) at each shape:
#   OUT=DIR bash benchmarks/attention_probe_gpu.sh
# Writes DIR/prefill_test.log and DIR/attention_probe_NAME.json (recorded as
# benchmarks/results/attention_probe_NAME_<device>.json).
set -u
out=$(realpath -m "${OUT:-attention-out}")
mkdir -p "$out"
source benchmarks/device_env.sh /tmp/kf-attention-repo
export KF_CACHE_DIR=/tmp/kf-attention-cache
python3 -m pytest -p no:cacheprovider -o addopts="" -m gpu -v -k prefill \
    kernels/tests/test_gpu_new_variants.py >"$out/prefill_test.log" 2>&1
tail -n 6 "$out/prefill_test.log"
# Around the family's default: the pipeline depth, the key block, fewer warps, a shorter q tile.
changes='[{}, {"NUM_STAGES": 2}, {"NUM_STAGES": 4}, {"BLOCK_N": 128}, {"NUM_WARPS": 4},
  {"BLOCK_M": 64, "NUM_WARPS": 4}, {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_WARPS": 4},
  {"BLOCK_N": 32, "NUM_STAGES": 4}]'
# name shape layout: Qwen2-7B, GPT-J-6B and llama_block's prefill, then ViT-B/16's encoder.
while read -r name shape layout; do
    echo "== $name attention/$shape/bf16/$layout"
    python3 -m benchmarks.points_probe attention "$shape" --layout "${layout#-}" \
        --family attention_flash --starting --changes "$changes" --deadline "${DEADLINE_S:-100}" \
        --out "$out/attention_probe_$name.json" 2>&1 | tail -n 14
done <<'SHAPES'
qwen2 2x28x1024x128 causal+kv_heads=4
gptj 4x16x512x256 causal
llama_block 8x16x2048x64 causal
vit 64x12x197x64 -
SHAPES
