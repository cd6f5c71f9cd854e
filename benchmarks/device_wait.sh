#!/usr/bin/env bash
# benchmarks/device_wait.sh OUT_DIR [SECONDS]: on a device machine, waits (default 540 s, under
# one call's 600) until OUT_DIR/log.log of benchmarks/model_jobs_gpu.sh (or any script that
# ends its log with an "exit" line) says it is done, then prints that log and the last lines
# of each model's log, a screenful at most. Short on purpose: the machine is given back 30 s
# after a call returns, so the next call must follow at once (a long output read in between
# lost a finished job's results once, 2026-12-02).
out=$1 wait_s=${2:-540}
for ((t = 0; t < wait_s; t += 5)); do
    grep -qs '^exit' "$out/log.log" && break
    sleep 5
done
cat "$out/log.log" 2>/dev/null || echo "no $out/log.log yet"
for f in "$out"/*.log; do
    [ "$f" = "$out/log.log" ] || [ ! -e "$f" ] && continue
    echo "== $f: $(tail -c 300 "$f" | tr '\n' ' ' | cut -c1-300)"
done
grep -qs '^exit' "$out/log.log" && echo DONE || echo RUNNING
