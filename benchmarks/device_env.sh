# Sourced by the device scripts (worker_scaling_gpu.sh, both_ways_gpu.sh) from the checkout's
# root as `source benchmarks/device_env.sh COPY`: it goes on in COPY, a copy of the checkout
# (each later device call re-sends the working tree, which would swap files under a running
# job). The GPU image has torch and triton but not the server side, so each call carries it
# (benchmarks/device_carry.sh builds it here; redis.tar.xz only where a run needs a broker):
#   .whl/site312.tar.xz   requirements.txt's packages for Python 3.12 less torch, triton, numpy,
#                         litellm (no LLM is configured; agents/llm.py is never imported), ncu-report
#                         (the image's Nsight Compute ships ncu_report) and what the image has
#   .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl   the CUTLASS headers
#   .whl/redis.tar.xz     .redis/: a redis-server build and the libraries it needs beyond the image's
#   .sandbox-bin/         bubblewrap for the sandbox, where the image has none (harness/tests/gpu_run.sh)
rm -rf "$1" && cp -a . "$1" && cd "$1" || exit 1
if ! python3 -c "import django, celery" 2>/dev/null; then
    # Once per machine, under a lock: jobs started side by side (one per GPU) share /tmp/site.
    (
        flock 9
        [ -e /tmp/site/.kf-ready ] && exit 0
        mkdir -p /tmp/site && tar -xJf .whl/site312.tar.xz -C /tmp/site || exit 1
        for w in .whl/*.whl; do
            [ -e "$w" ] && { python3 -m pip install -q --no-index --no-deps --target /tmp/site "$w" || exit 1; }
        done
        touch /tmp/site/.kf-ready
    ) 9>/tmp/site.lock || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! python3 -c "import ncu_report" 2>/dev/null && command -v ncu >/dev/null; then
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(dirname "$(readlink -f "$(command -v ncu)")")/extras/python
fi
[ -d .redis ] || [ ! -e .whl/redis.tar.xz ] || tar -xJf .whl/redis.tar.xz || exit 1
if ! command -v redis-server >/dev/null; then
    mkdir -p /tmp/redis-bin
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/.redis" "$PWD/.redis/redis-server" \
        >/tmp/redis-bin/redis-server
    chmod +x /tmp/redis-bin/redis-server
    export PATH=/tmp/redis-bin:$PATH
fi
if ! command -v bwrap >/dev/null && [ -x .sandbox-bin/bwrap ]; then export KF_BWRAP=$PWD/.sandbox-bin/bwrap; fi
export PYTHONUNBUFFERED=1
