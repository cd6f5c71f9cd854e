"""A whole model job without Django: profile -> Amdahl plan -> optimize the funded problems in
plan order -> substitute the winners and verify end to end. The Celery worker runs the same
steps as separate tasks; this is the shell / benchmark form:

    python -m benchmarks.model_job examples/models/llama_block.py --budget 240 --out result.json

The plan is made from the compiled model's profile where it compiles (what a team that already
uses torch.compile would still spend time on), with the Linear layers' time moved to the
fusions the model's graph allows (swiglu_gate, qkv_rotary). `--optimizer screen` screens our
own families' starting points on every funded problem in one sandboxed process (minutes, not
the agent's hours); `--optimizer families` evaluates each family's default point with the full
harness protocol (no LangGraph needed). `--replay RESULT.json` checks a recorded job's kept
kernels end to end again, rendered from their family and parameters (no profile, plan or
search: minutes, not the job's budget). `--record NAME` wraps the result for
benchmarks/results/: device, driver, versions, date, the exact command, and a summary: every
baseline and every way with the kernels, their compile times, and the speedup of the best
way with the kernels over the best baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from agents import fit
from agents.amdahl import Plan, make_plan, predicted_from_measured
from benchmarks import results_record
from harness.model import ModelProfile, Winner, profile_model, verify_model
from harness.model.screen import POINTS_PER_PROBLEM, screen_problems
from kernels.problem import Problem

MIN_KEEP_SPEEDUP = 1.0  # a kernel replaces the model's own only when it was measured faster


@dataclass
class ProblemOutcome:
    key: str
    optimizer: str  # "agent", "families" or "screen"
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
    from harness.results import Backend
    from kernels import get_op

    start = time.monotonic()
    best: tuple[float, Any, dict, str] | None = None
    for family in get_op(problem.op).families_for(problem):
        if time.monotonic() - start > budget_s:
            break
        params = family.default(problem)
        source = family.render(problem, params)
        # The family's backend: a CUDA C++/CUTLASS build gets its compile time (and none is
        # tried without a GPU), as in the agent's own evaluations.
        candidate = Candidate.of_render(
            source, Backend.of_family(family.backend), family.name, params
        )
        ev = evaluate(candidate, problem, config=EvalConfig(quick=True))
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


def optimize_by_screening(
    items: list, log: TextIO, *, points: int = POINTS_PER_PROBLEM, device: str | None = None
) -> list[ProblemOutcome]:
    """Every funded problem screened in one sandboxed process (harness.model.screen)."""
    start = time.monotonic()
    problems = [Problem.from_dict(item.problem) for item in items]
    screened = screen_problems(problems, limit=points, device=device)
    elapsed = (time.monotonic() - start) / max(1, len(items))
    outcomes = []
    for item, s in zip(items, screened, strict=True):
        log.write(json.dumps({"screened": s.to_dict()}, default=str) + "\n")
        note = s.error or (f"gate: {s.gate[0]}" if s.gate else f"{len(s.tried)} points")
        outcomes.append(
            ProblemOutcome(
                key=item.key,
                optimizer="screen",
                budget_s=item.budget_s,
                elapsed_s=elapsed,
                speedup=s.speedup,
                kept=s.won,
                family=s.family,
                params=s.params,
                source=s.source if s.won else "",
                note=note,
            )
        )
    return outcomes


def run_model_job(
    source: str,
    *,
    budget_s: float,
    max_problems: int | None = None,
    min_budget_s: float | None = None,
    optimizer: str = "agent",
    device: str | None = None,
    trace_to: str | None = None,
    log: TextIO = sys.stderr,
    checkpoint: Any = None,
    compile_threads: int = 1,
    max_autotune: bool = True,
    points: int = POINTS_PER_PROBLEM,
    baseline_rewrites: bool = True,
) -> dict[str, Any]:
    """checkpoint(partial_result) is called after each step (a long run keeps what it has).
    baseline_rewrites: verify_model's (on, as a job runs: sites where the op's PyTorch
    baseline does less than the model's code take it, weighed like a kernel, and the kernels
    alone are timed as the package runs them)."""
    started = time.monotonic()
    save = checkpoint or (lambda _partial: None)
    profile: ModelProfile = profile_model(
        source, device=device, trace_to=trace_to, compile_threads=compile_threads
    )
    out: dict[str, Any] = {"profile": profile.to_dict()}
    if not profile.ok:
        return out | {"ok": False, "message": profile.message}
    log.write(f"profiled ({profile.basis} basis) in {time.monotonic() - started:.0f}s\n")
    plan: Plan = make_plan(
        profile.plan_groups(),
        budget_s=budget_s,
        max_problems=max_problems,
        # None: what each problem needs (a screen round and one verification), as a job's.
        least=min_budget_s
        if min_budget_s is not None
        else fit.for_plan(gpu=profile.device == "cuda"),
    )
    out["plan"] = plan.to_dict()
    save(out)
    outcomes = []
    run = optimize_with_agent if optimizer == "agent" else optimize_with_families
    if optimizer == "screen":
        outcomes = optimize_by_screening(plan.funded, log, points=points, device=device)
        log.write(f"screened in {time.monotonic() - started:.0f}s (since the start)\n")
    for item in plan.funded if optimizer != "screen" else []:
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
    e2e = verify_model(
        source,
        winners,
        device=device,
        compile_threads=compile_threads,
        max_autotune=max_autotune,
        baseline_rewrites=baseline_rewrites,
    )
    out["end_to_end"] = e2e.to_dict()
    out["ok"] = e2e.ok
    out["elapsed_s"] = time.monotonic() - started
    return out


def replay(recorded: dict[str, Any], source: str, **verify_kw: Any) -> dict[str, Any]:
    """A recorded job's kept kernels, rendered again from their family and parameters, and
    the model checked end to end with them: no profile, plan or search. For a second look at
    a job's end-to-end result (its kernel tables say where the time went) in minutes, not the
    job's budget."""
    from kernels import get_op

    recorded = recorded.get("result", recorded)
    planned = {i["key"]: i["problem"] for i in recorded["plan"]["items"]}
    outcomes, winners = [], []
    for p in recorded.get("problems", []):
        if not (p.get("kept") and p.get("family")):
            continue
        problem = Problem.from_dict(planned[p["key"]])
        family = next(f for f in get_op(problem.op).families() if f.name == p["family"])
        winners.append(Winner(p["key"], family.render(problem, p["params"])))
        outcomes.append(p)
    e2e = verify_model(source, winners, **verify_kw)
    return {
        "plan": recorded["plan"],
        "problems": outcomes,
        "end_to_end": e2e.to_dict(),
        "ok": e2e.ok,
    }


def end_to_end_table(e2e: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per way the model ran: median forward back to back (OFFLINE) and one call at
    a time (SERVER), compile seconds, outputs within tolerance, or the error."""
    rows = []
    for name, v in (e2e.get("variants") or {}).items():
        row = {"variant": name, "side": v.get("side"), "label": v.get("label")}
        if v.get("error"):
            row["error"] = v["error"][-400:]
        for regime in ("offline", "server", "interpreter"):
            if v.get(regime):
                row[f"{regime}_us"] = v[regime]["median_us"]
        row |= {"compile_s": v.get("compile_s"), "outputs_match": v.get("ok")}
        rows.append(row)
    return rows


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers a reader wants first, all copied from `result` (nothing recomputed but
    the GPU-busy share and rounding)."""
    profile = result.get("profile", {})
    e2e = result.get("end_to_end", {})
    plan = result.get("plan", {})
    compiled = profile.get("compiled") or {}
    return {
        "kernel_us_per_step": profile.get("total_us"),
        "plain_forward_wall_us": profile.get("forward_wall_us"),
        "gpu_busy": profile.get("gpu_busy"),
        "plan_basis": profile.get("basis"),
        "compiled_kernel_us_per_step": compiled.get("total_us"),
        "plan": [
            {"key": i["key"], "share": round(i["share"], 4), "budget_s": i["budget_s"]}
            for i in plan.get("items", [])[:8]
        ],
        "optimized": [
            {k: p.get(k) for k in ("key", "family", "speedup", "kept", "elapsed_s", "note")}
            for p in result.get("problems", [])
        ],
        "amdahl_predicted_from_kernels": result.get("predicted_from_kernels"),
        "hits": e2e.get("hits"),
        "rewrites": e2e.get("rewrites"),
        "package": e2e.get("package"),
        "package_faster": e2e.get("package_faster"),
        "kernel_effects": [
            {k: a.get(k) for k in ("key", "effect", "effect_ci", "kept")}
            for a in e2e.get("ablation") or ()
        ],
        "end_to_end": end_to_end_table(e2e),
        "best_baseline": e2e.get("best_baseline"),
        "best_ours": e2e.get("best_ours"),
        "baseline_us": e2e.get("baseline_us"),
        "ours_us": e2e.get("ours_us"),
        "speedup_over_best_baseline": e2e.get("speedup"),
        "ci95": e2e.get("speedup_ci"),
        "faster": e2e.get("faster"),
        "message": e2e.get("message"),
    }


def record(result: dict[str, Any], name: str, argv: list[str]) -> dict[str, Any]:
    """A benchmarks/results/ entry: what ran, where, when, and the result."""
    return {
        "name": name,
        **results_record.stamp("benchmarks.model_job", argv),
        "summary": summarize(result),
        "result": result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_job")
    parser.add_argument("model", help="a .py file in the KernelBench convention")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for all problems")
    parser.add_argument("--max-problems", type=int, default=None)
    parser.add_argument(
        "--min-budget",
        type=float,
        default=None,
        help="smallest slice worth giving a problem (s; default: what each needs, agents.fit)",
    )
    parser.add_argument("--optimizer", choices=("agent", "families", "screen"), default="agent")
    parser.add_argument(
        "--compile-threads", type=int, default=1, help="Inductor compile threads in the sandbox"
    )
    parser.add_argument(
        "--no-max-autotune", action="store_true", help="skip the max-autotune baseline"
    )
    parser.add_argument(
        "--points", type=int, default=POINTS_PER_PROBLEM, help="points screened per problem"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--trace", default=None, help="keep the profiler's Chrome trace here")
    parser.add_argument("--out", default=None, help="write the result JSON here")
    parser.add_argument(
        "--record", default=None, help="wrap --out as a benchmarks/results/ entry with this name"
    )
    parser.add_argument(
        "--replay",
        default=None,
        help="a recorded job's JSON: its kept kernels checked end to end again (no search)",
    )
    parser.add_argument(
        "--no-baseline-rewrites",
        dest="baseline_rewrites",
        action="store_false",
        help="leave out what a job measures by default: sites where the op's PyTorch baseline "
        "does less than the model's code (SDPA grouping repeated k/v heads) taking it",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    with open(args.model) as f:
        source = f.read()

    def checkpoint(partial: dict) -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(partial, f, indent=1, default=str)

    if args.replay:
        with open(args.replay) as f:
            result = replay(
                json.load(f),
                source,
                device=args.device,
                compile_threads=args.compile_threads,
                max_autotune=not args.no_max_autotune,
                baseline_rewrites=args.baseline_rewrites,
            )
    else:
        result = run_model_job(
            source,
            checkpoint=checkpoint,
            budget_s=args.budget,
            max_problems=args.max_problems,
            min_budget_s=args.min_budget,
            optimizer=args.optimizer,
            device=args.device,
            trace_to=args.trace,
            compile_threads=args.compile_threads,
            max_autotune=not args.no_max_autotune,
            points=args.points,
            baseline_rewrites=args.baseline_rewrites,
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
