#!/usr/bin/env bash
# Issue 25 on a device machine: model jobs, as run for benchmarks/results/model_*_h200*.json:
#   benchmarks/model_jobs_gpu.sh OUT_DIR BUDGET_S MODEL[:BUDGET_S] [MODEL[:BUDGET_S] ...]
# (MODEL: examples/models/NAME.py; a model's own :BUDGET_S overrides the common one)
# On a machine of several GPUs the models are dealt out, one chain of jobs per GPU side by side
# (KF_GPUS: how many GPUs to use; default every one nvidia-smi lists), each chain in its own copy
# of the checkout with its own machine cache. The call carries what the GPU image lacks
# (benchmarks/device_env.sh says what). Start it with setsid so it outlives the device call that
# starts it; OUT_DIR/log.log shows progress and ends with an "exit" line; each model's JSON
# (recorded as model_NAME) and log are beside it.
# With KF_LIBRARY_ARCHIVE (a library packed where nvcc ran without a GPU: `python -m
# harness.library pack`) the machine's library starts from it, and no device time goes to nvcc
# for what it holds.
# With KF_LIBRARY_CLASSES (op/dtype/layout,...) the machine's kernel library is built first,
# for at most KF_LIBRARY_MINUTES (default 8) on every core, as a GPU worker builds it when it
# starts (harness/library.py), then copied into each chain's cache: the jobs run with a warm
# library, as on a worker that has been up a while. OUT_DIR/library.json is the build report.
# KF_MODEL_JOB_ARGS: more options for each benchmarks.model_job (e.g. --no-baseline-rewrites).
# Wait for it with benchmarks/device_wait.sh, whose output stays short: the machine goes back
# 30 s after a call returns, and a long output read before the next call can let it go.
set -u
out=$(realpath -m "$1") budget=$2
shift 2
models=("$@")
mkdir -p "$out"
# The checkout as this call sent it, before anything waits: a later device call (one that looks
# at the log) sends the tree again, without what it does not carry, and a chain copied from it
# after the library build ran with no bubblewrap (.sandbox-bin/ gone: every model refused).
snapshot=/tmp/kf-model-snapshot
rm -rf "$snapshot" && cp -a . "$snapshot" && cd "$snapshot" || exit 1
gpus=${KF_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "$gpus" -ge 1 ] || gpus=1

chain() {  # chain GPU: the models at GPU, GPU + gpus, ... one after another on that GPU
    local gpu=$1 i name
    source benchmarks/device_env.sh "/tmp/kf-model-repo-$gpu"
    export CUDA_VISIBLE_DEVICES=$gpu KF_CACHE_DIR=$cache-$gpu
    for ((i = gpu; i < ${#models[@]}; i += gpus)); do
        name=${models[$i]%%:*} model_budget=$budget
        [[ ${models[$i]} == *:* ]] && model_budget=${models[$i]#*:}
        echo "model $name started on GPU $gpu $(date -u +%FT%TZ)" >>"$out/log.log"
        python3 -m benchmarks.model_job "examples/models/$name.py" --budget "$model_budget" \
            --compile-threads 8 --record "model_$name" --out "$out/model_$name.json" \
            ${KF_MODEL_JOB_ARGS:-} >"$out/$name.log" 2>&1
        echo "model $name rc $? $(date -u +%FT%TZ)" >>"$out/log.log"
    done
}

cache=${KF_CACHE_DIR:-/tmp/kf-machine}
if [ -n "${KF_LIBRARY_ARCHIVE:-}" ]; then
    (
        source benchmarks/device_env.sh /tmp/kf-library-repo
        KF_CACHE_DIR=$cache-0 python3 -m harness.library unpack "$KF_LIBRARY_ARCHIVE"
    ) >>"$out/log.log" 2>&1 || echo "library unpack failed" >>"$out/log.log"
fi
if [ -n "${KF_LIBRARY_CLASSES:-}" ]; then
    echo "library build started $(date -u +%FT%TZ)" >>"$out/log.log"
    (
        source benchmarks/device_env.sh /tmp/kf-library-repo
        KF_CACHE_DIR=$cache-0 python3 -m harness.library build --classes "$KF_LIBRARY_CLASSES" \
            --minutes "${KF_LIBRARY_MINUTES:-8}" --out "$out/library.json" >"$out/library.log" 2>&1
    )
    echo "library build rc done $(date -u +%FT%TZ)" >>"$out/log.log"
fi
if [ -d "$cache-0" ]; then
    for ((gpu = 1; gpu < gpus && gpu < ${#models[@]}; gpu++)); do
        rm -rf "$cache-$gpu" && cp -a "$cache-0" "$cache-$gpu"
    done
fi

for ((gpu = 0; gpu < gpus && gpu < ${#models[@]}; gpu++)); do
    (chain "$gpu") &
done
wait
echo "exit 0 at $(date -u +%FT%TZ)" >>"$out/log.log"
