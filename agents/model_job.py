"""A whole model job without Django: profile -> Amdahl plan -> optimize the funded problems in
plan order -> substitute the winners and verify end to end. The Celery worker runs the same
steps as separate tasks; this is the shell / benchmark form:

    python -m agents.model_job examples/models/llama_block.py --budget 240 --out result.json

`--optimizer families` skips the agent graph and evaluates each kernel family's default point
(no LangGraph needed), for machines where the agent cannot run. `--record NAME` wraps the
result for benchmarks/results/: device, driver, versions, date, the exact command, and a
summary of predicted vs measured end-to-end speedups (eager, launch-bound, CUDA graphs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from agents.amdahl import Plan, make_plan, predicted_from_measured
from harness.model_profile import ModelProfile, profile_model
from harness.model_verify import Winner, verify_model
from kernels.problem import Problem

MIN_KEEP_SPEEDUP = 1.0  # a kernel replaces the model's own only when it was measured faster


@dataclass
class ProblemOutcome:
    key: str
    optimizer: str  # "agent" or "families"
    budget_s: float
    elapsed_s: float
    speedup: float | None  # best verified kernel vs the torch baseline (None: nothing passed)
    kept: bool  # substituted in the end-to-end run
    family: str | None = None
    params: dict | None = None
    source: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "source"} | {
            "source_chars": len(self.source)
        }


def optimize_with_agent(problem: Problem, budget_s: float, log: TextIO) -> ProblemOutcome:
    from agents.cli import CliReporter
    from agents.config import Budget, OptimizeConfig
    from agents.optimize import optimize

    start = time.monotonic()
    # Short slices verify with the quick protocol, not the full one (its torch.compile and
    # cuBLASLt baselines take minutes); the end-to-end check measures the kernels anyway.
    config = OptimizeConfig(
        budget=Budget(wall_s=budget_s), profile=False, full_protocol=budget_s >= 600
    )
    result = optimize(problem, config, CliReporter(log, wall_s=budget_s, progress=False))
    best = result.best
    speedup = result.final_speedups.get("torch") or (best.speedup if best else None)
    verified = result.verified is not False
    kept = bool(best and best.family and verified and speedup and speedup > MIN_KEEP_SPEEDUP)
    return ProblemOutcome(
        key=problem.key,
        optimizer="agent",
        budget_s=budget_s,
        elapsed_s=time.monotonic() - start,
        speedup=speedup,
        kept=kept,
        family=best.family if best else None,
        params=best.params if best else None,
        source=best.source if best and kept else "",
        note=f"stop: {result.stop_reason}; {result.attempts} attempts; verified={result.verified}",
    )


def optimize_with_families(problem: Problem, budget_s: float, log: TextIO) -> ProblemOutcome:
    """Each family's default point, evaluated by the harness (quick protocol); best kept."""
    from harness import Candidate, EvalConfig, evaluate
    from kernels import get_op

    start = time.monotonic()
    best: tuple[float, Any, dict, str] | None = None
    for family in get_op(problem.op).families():
        if time.monotonic() - start > budget_s:
            break
        params = family.default(problem)
        source = family.render(problem, params)
        ev = evaluate(Candidate(source), problem, config=EvalConfig(quick=True))
        speedup = ev.speedup("torch") if ev.ok else None
        log.write(
            json.dumps({"family": family.name, "verdict": str(ev.verdict), "speedup": speedup})
            + "\n"
        )
        if speedup and (best is None or speedup > best[0]):
            best = (speedup, family.name, params, source)
    kept = bool(best and best[0] > MIN_KEEP_SPEEDUP)
    return ProblemOutcome(
        key=problem.key,
        optimizer="families",
        budget_s=budget_s,
        elapsed_s=time.monotonic() - start,
        speedup=best[0] if best else None,
        kept=kept,
        family=best[1] if best else None,
        params=best[2] if best else None,
        source=best[3] if best and kept else "",
    )


def run_model_job(
    source: str,
    *,
    budget_s: float,
    max_problems: int | None = None,
    min_budget_s: float = 60.0,
    optimizer: str = "agent",
    device: str | None = None,
    trace_to: str | None = None,
    log: TextIO = sys.stderr,
    checkpoint: Any = None,
) -> dict[str, Any]:
    """checkpoint(partial_result) is called after each step (a long run keeps what it has)."""
    started = time.monotonic()
    save = checkpoint or (lambda _partial: None)
    profile: ModelProfile = profile_model(source, device=device, trace_to=trace_to)
    out: dict[str, Any] = {"profile": profile.to_dict()}
    if not profile.ok:
        return out | {"ok": False, "message": profile.message}
    plan: Plan = make_plan(
        [g.to_dict() for g in profile.groups],
        budget_s=budget_s,
        max_problems=max_problems,
        min_budget_s=min_budget_s,
    )
    out["plan"] = plan.to_dict()
    save(out)
    outcomes = []
    run = optimize_with_agent if optimizer == "agent" else optimize_with_families
    for item in plan.funded:
        problem = Problem.from_dict(item.problem)
        try:
            outcomes.append(run(problem, item.budget_s, log))
        except Exception as exc:  # one problem's failure leaves the others and the check
            log.write(f"{optimizer} failed on {item.key}: {exc!r}\n")
            if optimizer != "agent":
                outcomes.append(
                    ProblemOutcome(
                        item.key, optimizer, item.budget_s, 0.0, None, False, note=repr(exc)
                    )
                )
                continue
            fallback = optimize_with_families(problem, item.budget_s / 2, log)
            fallback.note = f"the agent failed ({exc!r}); kernel families' defaults instead"
            outcomes.append(fallback)
        out["problems"] = [o.to_dict() for o in outcomes]
        save(out)
    out["problems"] = [o.to_dict() for o in outcomes]
    winners = [Winner(o.key, o.source) for o in outcomes if o.kept]
    measured = {o.key: o.speedup for o in outcomes if o.kept and o.speedup}
    out["predicted_from_kernels"] = predicted_from_measured(plan, measured)
    e2e = verify_model(source, winners, device=device)
    out["end_to_end"] = e2e.to_dict()
    out["ok"] = e2e.ok
    out["elapsed_s"] = time.monotonic() - started
    return out


def _versions() -> dict[str, str]:
    """Device, driver and library versions of this machine (nvidia-smi, not a CUDA context:
    the model itself only ever runs in the sandboxed children)."""
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "absent"
    info["cuda"] = str(torch.version.cuda)
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        name, driver = (part.strip() for part in smi.stdout.splitlines()[0].split(",", 1))
        info |= {"device": name, "driver": driver}
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        info |= {"device": "cpu", "driver": "none"}
    return info


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers a reader wants first, all copied from `result` (nothing recomputed but
    the GPU-busy share and rounding)."""
    profile = result.get("profile", {})
    e2e = result.get("end_to_end", {})
    plan = result.get("plan", {})

    def pair(d: dict) -> dict | None:
        if not d or d.get("original_us") is None:
            return {"error": d.get("error", "")[-400:]} if d else None
        return {
            "original_us": d["original_us"],
            "substituted_us": d["substituted_us"],
            "speedup": d["speedup"],
            "ci95": d.get("speedup_ci"),
        } | ({"outputs_match": d["ok"]} if "ok" in d else {})

    return {
        "kernel_us_per_step": profile.get("total_us"),
        "plain_forward_wall_us": profile.get("forward_wall_us"),
        "gpu_busy": profile.get("gpu_busy"),
        "plan": [
            {"key": i["key"], "share": round(i["share"], 4), "budget_s": i["budget_s"]}
            for i in plan.get("items", [])[:5]
        ],
        "optimized": [
            {k: p.get(k) for k in ("key", "family", "speedup", "kept", "elapsed_s", "note")}
            for p in result.get("problems", [])
        ],
        "amdahl_predicted_from_kernels": result.get("predicted_from_kernels"),
        "outputs_match": bool(e2e.get("compare", {}).get("passed")),
        "hits": e2e.get("hits"),
        "eager_offline": pair(e2e),
        "eager_launch_bound": pair(e2e.get("launch_bound") or {}),
        "cuda_graphs": pair(e2e.get("graphed") or {}),
    }


def record(result: dict[str, Any], name: str, argv: list[str]) -> dict[str, Any]:
    """A benchmarks/results/ entry: what ran, where, when, and the result."""
    return {
        "name": name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": _versions(),
        "command": "python3 -m agents.model_job " + shlex.join(argv),
        "summary": summarize(result),
        "result": result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.model_job")
    parser.add_argument("model", help="a .py file in the KernelBench convention")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for all problems")
    parser.add_argument("--max-problems", type=int, default=None)
    parser.add_argument(
        "--min-budget", type=float, default=60.0, help="smallest slice worth giving a problem (s)"
    )
    parser.add_argument("--optimizer", choices=("agent", "families"), default="agent")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--trace", default=None, help="keep the profiler's Chrome trace here")
    parser.add_argument("--out", default=None, help="write the result JSON here")
    parser.add_argument(
        "--record", default=None, help="wrap --out as a benchmarks/results/ entry with this name"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    with open(args.model) as f:
        source = f.read()

    def checkpoint(partial: dict) -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(partial, f, indent=1, default=str)

    result = run_model_job(
        source,
        checkpoint=checkpoint,
        budget_s=args.budget,
        max_problems=args.max_problems,
        min_budget_s=args.min_budget,
        optimizer=args.optimizer,
        device=args.device,
        trace_to=args.trace,
    )
    if args.record:
        text = json.dumps(record(result, args.record, argv), indent=1, default=str)
        shown = json.dumps(summarize(result), indent=1, default=str)
    else:
        text = json.dumps(result, indent=1, default=str)
        shown = text[-4000:]
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(shown)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
