"""Where a screen's time goes on a cold compile cache, outside any worker (issue 26).

    python -m benchmarks.screen_probe 2048x6144x4096 --deadline 150 [--out F]

Screens the matmul starting pool and each family's default point at one bf16 NN shape, as the
agent's first rounds do: every point submitted at once (compile children on every core less
two), a first screen once the Triton points have compiled, then later ones for what finishes
after (the CUDA C++ builds). It
keeps each screening child's progress lines (the stage each candidate reached, with wall-clock
times) and counts the trusted Triton cache's files before and after each screen: files that
appear during a screen were compiled by the screening child, not ahead.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", help="matmul MxNxK, bf16 NN")
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds for everything")
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("KF_CACHE_DIR", tempfile.mkdtemp(prefix="kf-screen-probe-"))

    import kernels
    from benchmarks.pools import pool_for, valid_points
    from harness import screen as screen_mod
    from harness.compile_cache import trusted_triton_dir

    problem = kernels.parse_problem("matmul", args.shape, "bf16", "NN")
    op = kernels.get_op("matmul")
    # The starting pool, then each family's default point (the agent's planner also proposes
    # those: the CUDA WMMA family among them, which the pool leaves out).
    chosen = [*pool_for("matmul", problem), *((f.name, {}) for f in op.families())]
    points = [
        (family.backend, screen_mod.ScreenPoint(family.name, params))
        for family, params in valid_points(problem, chosen)
    ]

    progress: list[str] = []
    remove = screen_mod.shutil.rmtree

    def keep_progress(path, ignore_errors=False):  # the child's lines, before its folder goes
        lines = pathlib.Path(path) / "progress.jsonl"
        if lines.exists():
            progress.append(lines.read_text())
        remove(path, ignore_errors=ignore_errors)

    screen_mod.shutil.rmtree = keep_progress

    def cache_files() -> int:
        return sum(1 for p in pathlib.Path(trusted_triton_dir()).rglob("*") if p.is_file())

    t0 = time.time()
    deadline = time.monotonic() + args.deadline
    screener = screen_mod.Screener(problem, deadline_at=deadline)
    screener.submit([p for _, p in points])
    triton = sum(1 for backend, _ in points if backend == "triton")
    rounds: list[dict[str, Any]] = []
    while time.monotonic() < deadline - 10 and (screener.compiling or screener.ready):
        before = cache_files()
        started = time.time() - t0
        result = screener.screen(
            deadline_at=deadline, min_ready=triton if not rounds else 1, max_wait_s=60
        )
        steps = [json.loads(line) for text in progress for line in text.splitlines()]
        progress.clear()
        for step in steps:
            entry = step.pop("entry", None)
            if entry:  # the line that closes a candidate's first pass
                step["done"] = entry["verdict"]
            if "t" in step:
                step["t"] = round(step["t"] - t0, 2)
        rounds.append(
            {
                "started_s": round(started, 1),
                "ended_s": round(time.time() - t0, 1),
                "compile_wait_s": round(result.compile_wait_s, 1),
                "screen_children_s": round(result.gpu_s, 1),
                "triton_cache_files": [before, cache_files()],
                "error": result.error,
                "entries": [
                    {
                        "family": e.family,
                        "verdict": e.verdict.value,
                        "speedup": e.speedup,
                        "compile_s": round(e.compile_s, 1),
                        "detail": e.detail[-300:],
                    }
                    for e in result.entries
                ],
                "steps": steps,
            }
        )
        print(json.dumps({k: v for k, v in rounds[-1].items() if k != "steps"}), flush=True)
    screener.close()
    record = {
        "what": "one screen of the matmul starting pool on a cold compile cache",
        "command": "python -m benchmarks.screen_probe " + " ".join(argv or sys.argv[1:]),
        "points": [{"backend": b, "family": p.family} for b, p in points],
        "compile_children_s": round(screener.compile_cpu_s, 1),
        "rounds": rounds,
    }
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
