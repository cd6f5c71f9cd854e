"""Which of a judge spare's imports starts a second thread (harness/sandbox/boot.py _warm_up
refuses a spare with more than one: Landlock would miss it), on this machine, in the spare's
environment (harness.sandbox.process.child_env). Each import runs in a fresh interpreter that
imports the ones before it, so every count and time is that import's own:

    python -m benchmarks.spare_threads --out benchmarks/results/spare_threads_<device>.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

IMPORTS = (
    "numpy",
    "torch",
    "triton",
    "triton.language",
    "harness.phases",
    "torch._dynamo",
    "torch._inductor.compile_fx",
)

_PROBE = """
import importlib, json, os, sys, time
for name in sys.argv[1:-1]:
    importlib.import_module(name)
t0 = time.monotonic()
importlib.import_module(sys.argv[-1])
seconds = time.monotonic() - t0
names = []
for task in sorted(os.listdir("/proc/self/task")):
    try:
        names.append(open(f"/proc/self/task/{task}/comm").read().strip())
    except OSError:
        pass
print(json.dumps({"threads": len(names), "names": names, "import_s": round(seconds, 2)}))
"""


def main(argv: list[str] | None = None) -> int:
    from benchmarks import results_record
    from harness.sandbox.process import child_env

    parser = argparse.ArgumentParser(prog="python -m benchmarks.spare_threads")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    repo = str(Path(__file__).resolve().parents[1])
    rows = {}
    with tempfile.TemporaryDirectory() as workdir:
        env = {**child_env(workdir), "PYTHONPATH": repo}
        for i, name in enumerate(IMPORTS):
            out = subprocess.run(
                [sys.executable, "-c", _PROBE, *IMPORTS[: i + 1]],
                env=env, capture_output=True, text=True, check=True, timeout=300,
            ).stdout  # fmt: skip
            rows[name] = json.loads(out.splitlines()[-1])
            print(name, rows[name], flush=True)
    result = {
        "what": "threads after each import a judge spare makes, in the spare's environment",
        **results_record.stamp("benchmarks.spare_threads", argv or sys.argv[1:]),
        "imports": rows,
    }
    results_record.write(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
