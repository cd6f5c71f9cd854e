"""verify: re-evaluate the best once with the harness's full protocol and every baseline.

The search compares candidates in quick mode against one baseline; the number a user sees and
a leaderboard ranks comes from this run instead (more shapes, more samples, all baselines).
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.context import RunContext
from agents.state import OptimizeState


def verify(state: OptimizeState, runtime: Runtime[RunContext]) -> Command[Literal["__end__"]]:
    ctx = runtime.context
    best = state.get("best")
    if not ctx.config.final_verify or best is None or state.get("final") is not None:
        return Command(goto="__end__", update={"elapsed_s": ctx.elapsed()})
    candidate = ctx.candidate(best["source"], best["family"], "best")
    budget = ctx.config.budget
    left = [ctx.config.eval_timeout_s]
    if budget.wall_s is not None:
        left.append(budget.wall_s - ctx.elapsed())
    if budget.gpu_s is not None:
        left.append(budget.gpu_s - state.get("gpu_s", 0.0))
    timeout = max(5.0, min(left))
    try:
        evaluation = ctx.evaluator.evaluate(candidate, ctx.problem, timeout_s=timeout, full=True)
    except Exception as exc:  # the harness failed; the loop's result stands, unverified
        evaluation = None
        error = f"{type(exc).__name__}: {exc}"[:400]
    final: dict[str, Any] = {
        "index": best["index"],
        "verified": False,
        "error": "",
        "evaluation": None,
    }
    if evaluation is not None:
        final.update(
            verified=evaluation.ok,
            error=evaluation.error if not evaluation.ok else "",
            evaluation=evaluation.to_dict(),
            speedups=dict(evaluation.timings.speedups) if evaluation.timings else {},
        )
        gpu = evaluation.duration_s
    else:
        final["error"] = error
        gpu = 0.0
    return Command(
        goto="__end__",
        update={"final": final, "elapsed_s": ctx.elapsed(), "gpu_s": state.get("gpu_s", 0.0) + gpu},
    )
