"""Where the judge's torch.compile baseline build goes: the largest part of a full verification
left after 2026-11-28 (7.5-12.5 s on an H200 even with Inductor's graph cache hit;
results/verify_cost_h200_after_partial.json).

Each run is a fresh interpreter with the trusted children's compile caches (as the judge has
them), building only the "compile" baseline under cProfile, the way the judge does
(harness/judge/baselines.make). The first run may fill the caches; later runs are the judge's
usual case. Per run: the build's wall time, Inductor's cache counters, and the functions with
the most cumulative time.

    python -m benchmarks.compile_baseline_probe --shape 2048x6144x4096 --runs 3 \\
        --out benchmarks/results/compile_baseline_probe_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_ONE = r"""
import cProfile, io, json, pstats, sys, time
t0 = time.perf_counter()
import torch
import kernels
from harness.judge import baselines
from harness.ops import resolve_op
imported = time.perf_counter() - t0
problem = kernels.parse_problem(*sys.argv[1:5])
op = resolve_op(problem.op)
torch.cuda.init()
profiler = cProfile.Profile()
t0 = time.perf_counter()
profiler.enable()
built = baselines.make(("compile",), op, problem, "cuda", None)
profiler.disable()
wall = time.perf_counter() - t0
from torch._dynamo.utils import counters
text = io.StringIO()
pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(int(sys.argv[5]))
print("RESULT " + json.dumps({
    "imports_s": round(imported, 3), "build_s": round(wall, 3), "errors": built.errors,
    "inductor": {k: int(v) for k, v in counters["inductor"].items()},
    "top_cumulative": text.getvalue().splitlines()[-int(sys.argv[5]) - 2:],
}))
"""


def run_once(problem_args: list[str], top: int) -> dict:
    from harness.compile_cache import trusted_dirs, trusted_env

    trusted_dirs()  # made, as for the judge
    env = {**os.environ, **trusted_env(True)}
    env["TRITON_CACHE_DIR"] += "-baselines"  # the judge's baselines compile into their own
    out = subprocess.run(
        [sys.executable, "-c", _ONE, *problem_args, str(top)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": (out.stderr or out.stdout)[-3000:]}
    return json.loads(line.removeprefix("RESULT "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_baseline_probe")
    parser.add_argument("--op", default="matmul")
    parser.add_argument("--shape", default="2048x6144x4096")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--layout", default="NN")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from benchmarks import results_record

    problem_args = [args.op, args.shape, args.dtype, args.layout]
    runs = []
    for i in range(args.runs):
        runs.append(run_once(problem_args, args.top))
        print(i, json.dumps({k: v for k, v in runs[-1].items() if k != "top_cumulative"}))
    result = {
        "what": "the judge's torch.compile baseline build, fresh interpreter per run, cProfiled",
        **results_record.stamp("benchmarks.compile_baseline_probe", argv or sys.argv[1:]),
        "runs": runs,
    }
    results_record.write(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
