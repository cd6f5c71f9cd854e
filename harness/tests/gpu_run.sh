#!/usr/bin/env bash
# The harness's GPU validation, one device call: GPU tests first (serial: they time), then the
# CPU suite on the GPU (parallel). Output and JSON numbers go to $OUT (or ./gpu-out).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export KF_RESULTS_DIR=$OUT KF_CACHE_DIR=/tmp/kf-cache PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{
  echo "date: $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  which ncu nvcc cuobjdump
} 2>&1 | tee "$OUT/env.txt"
timeout ${GPU_TESTS_S:-420} python3 -m pytest harness/tests/test_gpu.py -v -p no:cacheprovider -o addopts="" ${GPU_K:+-k "$GPU_K"} 2>&1 | tee "$OUT/gpu_tests.log"
timeout ${CPU_TESTS_S:-240} python3 -m pytest harness -m "not gpu" -q -p no:cacheprovider -o addopts="" -n 8 2>&1 | tee "$OUT/suite_on_gpu.log"
