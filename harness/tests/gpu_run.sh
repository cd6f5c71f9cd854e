#!/usr/bin/env bash
# The harness's GPU validation, one device call: GPU tests first (serial: they time), then the
# CPU suite on the GPU (parallel). Numbers (JSON), logs and the recorded .ncu-rep end up in $OUT
# as few files (the device tool returns at most 8).
# test_gpu.py no longer fits one 600 s device call: split it with GPU_K, e.g.
#   SKIP_SUITE=1 GPU_K='ceilings or itself or side_stream or cached or memory_bound' ...
#   SKIP_SUITE=1 GPU_K='sanitizer or lazy or server or illegal or ncu or cuda_candidate' ...
set -u
OUT=${OUT:-gpu-out}
RES=/tmp/kf-results
mkdir -p "$OUT" "$RES"
export KF_RESULTS_DIR=$RES KF_CACHE_DIR=/tmp/kf-cache PYTHONUNBUFFERED=1
# Untrusted children run only inside bubblewrap: where the image lacks it, a carried binary
# (Debian's, in .sandbox-bin/) does.
if ! command -v bwrap >/dev/null && [ -x .sandbox-bin/bwrap ]; then export KF_BWRAP=$PWD/.sandbox-bin/bwrap; fi
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{
  echo "date: $(date -u +%FT%TZ)"; echo "command: bash harness/tests/gpu_run.sh ${GPU_K:+(GPU_K=$GPU_K)}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton, numpy, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
  which ncu nvcc cuobjdump; echo "bwrap: ${KF_BWRAP:-$(command -v bwrap)}"
} > "$RES/env.txt" 2>&1
timeout ${GPU_TESTS_S:-330} python3 -m pytest harness/tests/test_gpu.py -v -p no:cacheprovider -o addopts="" ${GPU_K:+-k "$GPU_K"} > "$RES/gpu_tests.log" 2>&1
if [ -z "${SKIP_SUITE:-}" ]; then
  timeout ${CPU_TESTS_S:-200} python3 -m pytest harness -m "not gpu" -q -p no:cacheprovider -o addopts="" -n 8 > "$RES/suite_on_gpu.log" 2>&1
fi
cp "$RES"/*.ncu-rep "$OUT"/ 2>/dev/null
tar czf "$OUT/results.tgz" -C "$RES" --exclude='*.ncu-rep' .
tail -n 40 "$RES/gpu_tests.log"; tail -n 25 "$RES/suite_on_gpu.log" 2>/dev/null
