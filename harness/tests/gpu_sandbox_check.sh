#!/usr/bin/env bash
# The sandbox's GPU check, one device call (~2-3 min): what the GPU image offers (util-linux,
# libseccomp, Landlock), a CUDA child's isolation record, the issue-15 escapes on the GPU, the
# sandbox-relevant GPU tests (side stream, illegal address, compute-sanitizer, ncu) and the
# per-phase wall times before/after (BASE: a checkout of the code before, e.g. .kfbase).
# Logs, junit XML and JSON end up in $OUT/sandbox_check.tgz.
set -u
OUT=${OUT:-gpu-out}
RES=/tmp/kf-results
mkdir -p "$OUT" "$RES"
export KF_RESULTS_DIR=$RES KF_CACHE_DIR=/tmp/kf-cache PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
{
  echo "date: $(date -u +%FT%TZ)"; echo "kernel: $(uname -r)"; id
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  unshare --version; setpriv --version; ls /usr/lib/x86_64-linux-gnu/libseccomp* 2>&1
  which ncu compute-sanitizer nvcc nvidia-modprobe
  ls -l /dev/nvidia*; grep -i ModifyDeviceFiles /proc/driver/nvidia/params
} > "$RES/env.txt" 2>&1
# A CUDA child's isolation record, and the device ceilings measured once (cached for the rest).
timeout 120 python3 - > "$RES/probe.txt" 2>&1 <<'EOF'
import json, tempfile
from harness.config import Limits
from harness.device import device_ceilings
from harness.sandbox import namespaces, run_child
print("support", namespaces.support())
with tempfile.TemporaryDirectory() as w:
    res = run_child("selftest_env", {}, w, limits=Limits(wall_s=60), cuda=True, spares=False)
print(res.status, res.error, res.wall_s)
print(json.dumps(res.isolation.to_dict(), indent=1))
print(res.output[-2000:])
print(device_ceilings())
EOF
T0=$(date +%s)
# The issue-15 escapes and the sandbox-relevant GPU tests (no timing assertions among them),
# in parallel: compute-sanitizer and ncu run inside the new namespaces here.
K=${K:-"environment_of or unix_sockets or shared_memory or undo or isolation_record or started_at_import or catches_an_out or ncu or illegal"}
timeout ${TESTS_S:-150} python3 -m pytest harness/tests/test_isolation.py harness/tests/test_gpu.py -v \
  -p no:cacheprovider -o addopts="" -o log_cli=true -o log_cli_level=WARNING -n ${N:-8} -k "$K" \
  --junitxml="$RES/tests.xml" > "$RES/tests.log" 2>&1
T2=$(date +%s)
if [ -n "${BASE:-}" ]; then
  timeout ${COST_S:-90} python3 -m benchmarks.sandbox_cost --base "$BASE" --rounds ${COST_ROUNDS:-1} --n ${COST_N:-2} \
    --fixtures ${COST_FIXTURES:-honest_triton_rmsnorm} --out "$RES/sandbox_cost_gpu.json" > "$RES/cost.log" 2>&1
fi
T3=$(date +%s)
echo "tests_s=$((T2-T0)) cost_s=$((T3-T2))" >> "$RES/env.txt"
cp "$RES"/*.ncu-rep "$OUT"/ 2>/dev/null
tar czf "$OUT/sandbox_check.tgz" -C "$RES" --exclude='*.ncu-rep' .
cat "$RES/env.txt" "$RES/probe.txt"; tail -n 30 "$RES/tests.log" "$RES/cost.log" 2>/dev/null
