"""What one full verification costs on this machine, and where its time goes.

A full verification is what an agent run ends with for its challenger (issue 24 item 6): the
judge child (cases on secret seeds, timing against every baseline, every check) and then
compute-sanitizer's memcheck. This runs the agent's own full-protocol settings
(agents.evaluator.HarnessEvaluator) on the first `--n` renders of the op's starting pool for
the problem, one after another, each as an agent run would: optionally compiled ahead at every
shape of the protocol first (`--ahead`, what prefetch_final does during the screen: all of them
at once, before the first is evaluated), then evaluated. Per candidate it keeps the evaluate()
call's wall time, its verdict, each child's wall time (`phase_wall_s`) and the judge's own
phases (`judge_s`); the summary has medians.

    python -m benchmarks.verify_cost --op matmul --shape 2048x6144x4096 --dtype bf16 --n 4 \
        --ahead --out benchmarks/results/verify_cost_h100.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks import results_record
from benchmarks.pools import pool_for, valid_points


def renders(problem, n: int) -> list:
    """The first n starting points that the family accepts, rendered as our candidates."""
    from harness import Backend, Candidate

    return [
        Candidate.of_render(
            family.render(problem, params), Backend.of_family(family.backend), family.name, params
        )
        for family, params in valid_points(problem, pool_for(problem.op, problem))[:n]
    ]


def measure(problem, n: int, ahead: bool, timeout_s: float) -> list[dict[str, Any]]:
    import harness
    from agents.config import OptimizeConfig
    from agents.evaluator import HarnessEvaluator

    evaluator = HarnessEvaluator(OptimizeConfig(precompile=True))
    settings = evaluator._settings(timeout_s, full=True)
    candidates = renders(problem, n)
    compiled: dict[str, Any] = {}
    if ahead:  # all at once, as the agent's pool does, and done before any is timed
        with ThreadPoolExecutor(len(candidates) or 1) as pool:
            compiled = dict(
                zip(
                    [c.id for c in candidates],
                    pool.map(lambda c: harness.precompile(c, problem, config=settings), candidates),
                    strict=True,
                )
            )
    rows = []
    for candidate in candidates:
        row: dict[str, Any] = {"family": candidate.family, "params": dict(candidate.params)}
        if candidate.id in compiled:
            row["ahead_s"] = round(compiled[candidate.id].seconds, 2)
            row["ahead_ok"] = compiled[candidate.id].ok
        t0 = time.monotonic()
        ev = harness.evaluate(candidate, problem, config=settings)
        row["total_s"] = round(time.monotonic() - t0, 2)
        row["verdict"] = ev.verdict.value
        row["error"] = (ev.error or "")[-1500:]  # the end of a traceback says what failed
        timings = ev.timings  # none when it failed before the timing stage
        row["speedups"] = {k: round(v, 4) for k, v in timings.speedups.items()} if timings else {}
        row["phase_wall_s"] = ev.checks.get("phase_wall_s", {})
        row["judge_s"] = ev.checks.get("judge_s", {})
        memcheck = ev.checks.get("sanitizer", {}).get("memcheck", {})
        wall = round(memcheck.get("wall_s", 0.0), 3)
        row["sanitize_s"] = {"wall": wall, **memcheck.get("phase_s", {})}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    def flat(row: dict[str, Any]) -> dict[str, float]:
        sanitize = {f"sanitize_{k}": v for k, v in row["sanitize_s"].items()}
        return {**row["phase_wall_s"], **row["judge_s"], **sanitize}

    keys = sorted({k for r in rows for k in flat(r)})
    parts = {key: median([flat(r)[key] for r in rows if key in flat(r)]) for key in keys}
    return {
        "median_total_s": median([r["total_s"] for r in rows]),
        "verdicts": [r["verdict"] for r in rows],
        "median_parts_s": parts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verify_cost")
    parser.add_argument("--op", default="matmul")
    parser.add_argument("--shape", default="2048x6144x4096")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--layout", default="NN")
    parser.add_argument("--n", type=int, default=4, help="candidates verified one after another")
    parser.add_argument("--ahead", action="store_true", help="compile each ahead, as the agent")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import harness
    import kernels

    problem = kernels.parse_problem(args.op, args.shape, args.dtype, args.layout)
    t0 = time.monotonic()
    harness.warm_up(problem, deadline_s=600)
    warm_s = round(time.monotonic() - t0, 2)
    rows = measure(problem, args.n, args.ahead, args.timeout)
    result = {
        "what": "full verifications (agent's final protocol) one after another, by phase",
        "problem": problem.key,
        **results_record.stamp("benchmarks.verify_cost", argv or sys.argv[1:]),
        "warm_up_s": warm_s,
        "summary": summary(rows),
        "candidates": rows,
    }
    print(json.dumps(result["summary"], indent=1))
    results_record.write(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
