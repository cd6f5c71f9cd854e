"""One acceptance run's JSON for benchmarks/results/: device, versions, command, the outcome,
screened vs fully verified counts, candidates per GPU-hour per tier, where the time went, the
wall clock of the whole command, the verified attempts, and the best's full-protocol
verification (speedups vs every baseline, 95 % CIs, noise).

    python3 -m benchmarks.agent_run_summary RUN.jsonl DEVICE.txt "COMMAND" [WALL_S] > RUN.json

Everything comes from the CLI's JSON lines and what benchmarks/agent_run_gpu.sh recorded about
the machine; nothing is typed in by hand.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any


def summarize(
    lines: list[dict[str, Any]],
    device: dict[str, Any],
    command: str,
    command_wall_s: float | None = None,
) -> dict[str, Any]:
    started = next((d for d in lines if d.get("event") == "started"), {})
    summary: dict[str, Any] = next((d for d in reversed(lines) if d.get("event") == "summary"), {})
    iterations = [d for d in lines if d.get("event") == "iteration"]
    best = summary.get("best") or {}
    problem = started.get("problem", {})
    return {
        "what": f"python -m agents optimize (offline provider): {_problem_key(problem)}",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device,
        "command": command,
        "problem": problem,
        "budget": started.get("budget"),
        "stop_reason": summary.get("stop_reason"),
        "outcome": summary.get("outcome"),
        "outcome_reason": summary.get("outcome_reason"),
        # The whole command, process start to exit (the budget covers it: + 5 % at most).
        "command_wall_s": command_wall_s,
        "within_budget": _within_budget(started.get("budget"), command_wall_s),
        "screened": summary.get("screened"),
        "fully_verified": (summary.get("tiers") or {}).get("verify", {}).get("candidates"),
        "tiers": summary.get("tiers"),
        "time_s": summary.get("time_s"),
        "attempts": summary.get("attempts"),
        "evaluated": summary.get("evaluated"),
        "verdicts": summary.get("verdicts"),
        "elapsed_s": summary.get("elapsed_s"),
        "gpu_s": summary.get("gpu_s"),
        "candidates_per_gpu_hour": summary.get("candidates_per_gpu_hour"),
        "candidates_per_wall_hour": summary.get("candidates_per_wall_hour"),
        "compile_s_saved": summary.get("compile_s_saved"),
        "compile": summary.get("compile"),
        "best": {
            "index": best.get("index"),
            "family": best.get("family"),
            "params": best.get("params"),
            "speedup_vs_baseline": best.get("speedup"),
            "screen_speedup": best.get("screen_speedup"),
            "candidate_id": best.get("candidate_id"),
        }
        if best
        else None,
        "final_verification": _final(summary, best.get("evaluation")),
        "attempts_table": [_attempt(d) for d in iterations],
        "notes": summary.get("notes"),
    }


def _final(summary: dict[str, Any], ev: dict[str, Any] | None) -> dict[str, Any] | None:
    if not ev:
        return None
    timings = ev.get("timings") or {}
    cand = (timings.get("candidate") or {}).get("median_us")
    return {
        "verified": summary.get("verified"),
        "verdict": ev.get("verdict"),
        "error": ev.get("error"),
        "regime": timings.get("regime"),
        "protocol": timings.get("protocol"),
        "speedups": timings.get("speedups"),
        "speedup_ci95": timings.get("speedup_ci"),
        "noise": timings.get("noise"),
        "candidate_median_us": cand,
        "candidate_samples": (timings.get("candidate") or {}).get("samples"),
        "baseline_median_us": {
            k: v.get("median_us") for k, v in (timings.get("baselines") or {}).items()
        },
        "tflops": ev.get("tflops"),
        "gbps": ev.get("gbps"),
        "pct_of_roof": ev.get("pct_of_roof"),
        "stages": [
            {"name": s.get("name"), "passed": s.get("passed"), "cases": s.get("cases")}
            for s in ev.get("stages") or []
        ],
        "sanitizer": (ev.get("checks") or {}).get("sanitizer"),
        "findings": ev.get("findings"),
        "duration_s": ev.get("duration_s"),
        "device": ev.get("device"),
    }


def _attempt(d: dict[str, Any]) -> dict[str, Any]:
    ev = d.get("evaluation") or {}
    timings = ev.get("timings") or {}
    return {
        "index": d.get("index"),
        "verdict": d.get("verdict"),
        "family": d.get("family"),
        "params": d.get("params"),
        "tier": d.get("tier"),
        "speedup": d.get("speedup"),
        "screen_speedup": d.get("screen_speedup"),
        "median_us": (timings.get("candidate") or {}).get("median_us"),
        "noise": timings.get("noise"),
        "harness_s": d.get("gpu_s"),
        "elapsed_s": d.get("elapsed_s"),
        "compile_cached": (ev.get("compile") or {}).get("cached"),
        "reason": d.get("reason"),
    }


def _within_budget(budget: dict[str, Any] | None, wall: float | None) -> bool | None:
    cap = (budget or {}).get("wall_s")
    return None if cap is None or wall is None else wall <= 1.05 * cap


def _problem_key(problem: dict[str, Any]) -> str:
    shape = "x".join(str(s) for s in problem.get("shape", []))
    return f"{problem.get('op')} {shape} {problem.get('dtype')}"


def read_device(path: Path) -> dict[str, Any]:
    """device.txt as agent_run_gpu.sh writes it: `key: value` lines."""
    out: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def main(argv: list[str]) -> int:
    """RUN.jsonl DEVICE.txt "COMMAND" [WALL_SECONDS of the whole command]"""
    jsonl, device_txt, command = Path(argv[0]), Path(argv[1]), argv[2]
    wall = float(argv[3]) if len(argv) > 3 else None
    lines = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    out = summarize(lines, read_device(device_txt), command, wall)
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
