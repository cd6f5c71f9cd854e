"""A whole model job without Django: profile -> Amdahl plan -> optimize the funded problems in
plan order -> substitute the winners and verify end to end. The Celery worker runs the same
steps as separate tasks; this is the shell / benchmark form:

    python -m agents.model_job examples/models/llama_block.py --budget 240 --out result.json

`--optimizer families` skips the agent graph and evaluates each kernel family's default point
(no LangGraph needed), for machines where the agent cannot run.
"""

from __future__ import annotations

import argparse
import json
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
    # Short slices skip the agent's final full-protocol re-evaluation (its torch.compile and
    # cuBLASLt baselines take minutes); the end-to-end check measures the kernels anyway.
    config = OptimizeConfig(
        budget=Budget(wall_s=budget_s), profile=False, final_verify=budget_s >= 600
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
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text[-4000:] if len(text) > 4000 else text)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
