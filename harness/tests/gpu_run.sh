#!/usr/bin/env bash
# The harness's GPU validation, one device call: the GPU tests that time (GPU_K, a pytest -k
# filter on test_gpu.py) run first and alone on the GPU; then the CPU suite with every evaluation
# on the GPU (the exploit suite) runs beside the GPU tests that take no timing (PARALLEL_K, a -k
# filter on every file with GPU tests of the harness's boundary). Numbers (JSON), logs and the
# recorded .ncu-rep end up in $OUT as few files (the device tool returns at most 8).
# Everything does not fit one 600 s device call: split it, e.g.
#   GPU_K='itself or untrusted_copy or side_stream or cached or memory_bound' \
#   PARALLEL_K='sanitizer or ncu or cutlass or cuda_candidate or model_gpu or recorded_again' ...
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
PYTEST=(python3 -m pytest -p no:cacheprovider -o addopts="")
timeout ${GPU_TESTS_S:-330} "${PYTEST[@]}" harness/tests/test_gpu.py -v ${GPU_K:+-k "$GPU_K"} > "$RES/gpu_tests.log" 2>&1
if [ -z "${SKIP_SUITE:-}" ]; then
  timeout ${CPU_TESTS_S:-200} "${PYTEST[@]}" harness -m "not gpu" -q -n 6 > "$RES/suite_on_gpu.log" 2>&1 &
fi
if [ -n "${PARALLEL_K:-}" ]; then
  timeout ${PARALLEL_S:-300} "${PYTEST[@]}" harness/tests/test_gpu.py harness/tests/test_model_gpu.py \
    agents/tests/test_precompile.py -m gpu -v -n 3 -k "$PARALLEL_K" > "$RES/parallel_gpu.log" 2>&1 &
fi
wait
cp "$RES"/*.ncu-rep "$OUT"/ 2>/dev/null
tar czf "$OUT/results.tgz" -C "$RES" --exclude='*.ncu-rep' .
tail -n 30 "$RES/gpu_tests.log"; tail -n 25 "$RES/parallel_gpu.log" 2>/dev/null
tail -n 25 "$RES/suite_on_gpu.log" 2>/dev/null
