"""Which of a judge spare's imports starts a second thread (harness/sandbox/boot.py _warm_up
refuses a spare with more than one: Landlock would miss it), on this machine, in the spare's
environment (harness.sandbox.process.child_env). Each import runs in a fresh interpreter that
imports the ones before it, so every count and time is that import's own:

    python -m benchmarks.spare_threads --out benchmarks/results/spare_threads_<device>.json

`--walk torch._inductor.compile_fx` follows one import inside: after those above it, it imports
the module with every nested import watched, and names the first one whose own execution
started a thread (on the GPU image that import starts CUDA, so a spare cannot make it; issue 24
item 6: how much of the judge's torch.compile baseline setup a spare could still take ahead).
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


_WALK = """
import importlib, importlib.abc, json, os, sys, time
for name in sys.argv[1:-1]:
    importlib.import_module(name)


def threads():
    return len(os.listdir("/proc/self/task"))


done = []  # (module, threads before its code ran, after, seconds), in order of completion


class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(name, path, target)
            if spec is None:
                continue
            run = getattr(spec.loader, "exec_module", None)
            if run is not None:
                def exec_module(module, run=run, name=name):
                    before, t0 = threads(), time.monotonic()
                    run(module)
                    done.append((name, before, threads(), time.monotonic() - t0))
                spec.loader.exec_module = exec_module
            return spec
        return None


sys.meta_path.insert(0, Watch())
t0 = time.monotonic()
importlib.import_module(sys.argv[-1])
total = time.monotonic() - t0
first = next((i for i, (_, before, after, _) in enumerate(done) if after > before), None)
print(json.dumps({
    "import_s": round(total, 2),
    "modules": len(done),
    "culprit": None if first is None else done[first][0],
    "modules_before_culprit": len(done) if first is None else first,
    "threads_after": threads(),
}))
"""


def walk(target: str, env: dict[str, str], before: tuple[str, ...] | None = None) -> dict:
    """The first module under `target`'s import whose own code started a thread, after
    `before` (the spare's imports) were made."""
    if before is None:
        before = tuple(m for m in IMPORTS if m != target)
    out = subprocess.run(
        [sys.executable, "-c", _WALK, *before, target],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    return json.loads(out.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from benchmarks import results_record
    from harness.sandbox.process import child_env

    parser = argparse.ArgumentParser(prog="python -m benchmarks.spare_threads")
    parser.add_argument("--out")
    parser.add_argument(
        "--walk", help="a module to follow inside (e.g. torch._inductor.compile_fx)"
    )
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
        walked = walk(args.walk, env) if args.walk else None
        if walked:
            print(args.walk, walked, flush=True)
    result = {
        "what": "threads after each import a judge spare makes, in the spare's environment",
        **results_record.stamp("benchmarks.spare_threads", argv or sys.argv[1:]),
        "imports": rows,
        **({"walk": {args.walk: walked}} if walked else {}),
    }
    results_record.write(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
