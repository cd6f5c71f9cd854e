#!/usr/bin/env bash
# One acceptance run of the offline optimizer on a GPU box, as taken for benchmarks/results/.
#   agents/benchmark_gpu.sh OUT_DIR NAME -- <python -m agents optimize arguments>
# Writes OUT_DIR/NAME.jsonl (every event, then the summary), appends stderr to OUT_DIR/run.log
# and the device and versions to OUT_DIR/device.txt; prints the summary last.
set -u
out=$1 name=$2
shift 3
mkdir -p "$out"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} >>"$out/device.txt"
echo "== $name: python3 -m agents optimize $*" >>"$out/run.log"
started=$(date +%s)
python3 -m agents optimize "$@" --no-progress --checkpoint "sqlite:////tmp/kf-$name.sqlite3" \
    >"$out/$name.jsonl" 2>>"$out/run.log"
status=$?
echo "== $name: exit $status after $(($(date +%s) - started)) s" | tee -a "$out/run.log"
tail -n 1 "$out/$name.jsonl" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read() or "{}")
keys = ("stop_reason", "attempts", "evaluated", "verdicts", "elapsed_s", "gpu_s", "candidates_per_gpu_hour", "verified", "final_speedups")
print(json.dumps({k: d.get(k) for k in keys}))
best = d.get("best") or {}
print("best:", best.get("index"), best.get("family"), best.get("params"), "quick-mode speedup", best.get("speedup"))
'
exit $status
