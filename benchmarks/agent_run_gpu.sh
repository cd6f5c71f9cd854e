#!/usr/bin/env bash
# One acceptance run of the offline optimizer on a GPU box, as taken for benchmarks/results/.
#   benchmarks/agent_run_gpu.sh OUT_DIR NAME -- <python -m agents optimize arguments>
# Installs the carried wheels in .whl/ (langgraph & co.; the GPU image has none) when needed,
# then writes OUT_DIR/NAME.jsonl (every event, then the summary), OUT_DIR/NAME.json (device,
# versions, command, the whole command's wall clock, outcome, screened vs verified, per-tier
# throughput, time breakdown, final verification: benchmarks/agent_run_summary.py), appends
# stderr to OUT_DIR/run.log and the device and versions to OUT_DIR/device.txt.
set -u
out=$1 name=$2
shift 3
mkdir -p "$out"
if ! python3 -c "import langgraph" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
# With KF_MACHINE_CACHE (a cache where the device's ceilings were measured and the cuBLASLt
# baseline built, once per machine, as on a worker), each run gets a fresh cache of its own
# with those facts only: nothing an earlier run compiled helps this one.
if [ -n "${KF_MACHINE_CACHE:-}" ]; then
    export KF_CACHE_DIR=/tmp/kfc-$name
    rm -rf "$KF_CACHE_DIR" && mkdir -p "$KF_CACHE_DIR"
    cp -r "$KF_MACHINE_CACHE"/ceilings-*.json "$KF_MACHINE_CACHE"/cublaslt-* "$KF_CACHE_DIR"/ 2>/dev/null
fi
{
    echo "name: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    python3 -c "
import importlib.metadata as m, sys, torch, triton
print('python:', sys.version.split()[0]); print('torch:', torch.__version__)
print('triton:', triton.__version__); print('cuda:', torch.version.cuda)
print('langgraph:', m.version('langgraph')); print('cpus:', __import__('os').cpu_count())"
} >"$out/device-$name.txt"
cat "$out/device-$name.txt" >>"$out/device.txt"
command="python3 -m agents optimize $* --no-progress --checkpoint sqlite:////tmp/kf-$name.sqlite3"
echo "== $name: $command" >>"$out/run.log"
started=$(date +%s.%N)
python3 -m agents optimize "$@" --no-progress --checkpoint "sqlite:////tmp/kf-$name.sqlite3" \
    >"$out/$name.jsonl" 2>>"$out/run.log"
status=$?
wall=$(python3 -c "print(round($(date +%s.%N) - $started, 2))")  # the whole command
echo "== $name: exit $status after $wall s" | tee -a "$out/run.log"
python3 -m benchmarks.agent_run_summary "$out/$name.jsonl" "$out/device-$name.txt" \
    "benchmarks/agent_run_gpu.sh OUT $name -- $*  (runs: $command)" "$wall" >"$out/$name.json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
keys = ("stop_reason", "outcome", "outcome_reason", "command_wall_s", "within_budget",
        "screened", "fully_verified", "tiers", "time_s", "elapsed_s", "gpu_s", "verdicts", "best")
print(json.dumps({k: d.get(k) for k in keys}))
f = d.get("final_verification") or {}
print("final:", json.dumps({k: f.get(k) for k in ("verified", "verdict", "error", "speedups", "speedup_ci95", "noise", "sanitizer", "duration_s")})[:3000])
' "$out/$name.json"
exit $status
