"""Hard caps and stop conditions, checked before every step (P8).

A step that would need the GPU is not started when the time left is less than a typical
evaluation took so far: a cap is a cap, not a point to start overrunning from.
"""

from __future__ import annotations

import statistics

from agents.context import RunContext
from agents.state import OptimizeState, StopReason

# A worker whose harness keeps failing (not the candidates) stops instead of burning the budget.
HARNESS_ERRORS_IN_ROW = 3


def stop_reason(state: OptimizeState, ctx: RunContext, *, needs_gpu: bool) -> StopReason | None:
    config, budget = ctx.config, ctx.config.budget
    if ctx.reporter.cancel_requested():
        return StopReason.CANCELLED
    best = state.get("best")
    if best is not None:
        if config.target_speedup is not None and best["speedup"] >= config.target_speedup:
            return StopReason.TARGET
        roof = best.get("pct_of_roof")
        if config.roof_pct is not None and roof is not None and roof >= config.roof_pct:
            return StopReason.ROOF
    recent = [r["verdict"] for r in state.get("history", [])[-HARNESS_ERRORS_IN_ROW:]]
    if len(recent) == HARNESS_ERRORS_IN_ROW and all(v == "error" for v in recent):
        return StopReason.HARNESS_ERRORS
    if config.plateau is not None and state.get("not_kept_in_row", 0) >= config.plateau:
        return StopReason.PLATEAU
    if budget.max_attempts is not None and state.get("next_index", 0) >= budget.max_attempts:
        return StopReason.MAX_ATTEMPTS
    if budget.llm_tokens is not None and state.get("llm_tokens", 0) >= budget.llm_tokens:
        return StopReason.LLM_TOKENS
    if budget.llm_cost_usd is not None and state.get("llm_cost_usd", 0.0) >= budget.llm_cost_usd:
        return StopReason.LLM_COST
    step = typical_eval_s(state) if needs_gpu else 0.0
    keep = 1.0 - config.verify_reserve if config.final_verify else 1.0
    if budget.wall_s is not None and ctx.elapsed() + step >= budget.wall_s * keep:
        return StopReason.WALL_TIME
    if budget.gpu_s is not None and state.get("gpu_s", 0.0) + step >= budget.gpu_s * keep:
        return StopReason.GPU_TIME
    return None


def typical_eval_s(state: OptimizeState) -> float:
    recent = state.get("eval_seconds", [])[-8:]
    return statistics.median(recent) if recent else 0.0


def time_left(state: OptimizeState, ctx: RunContext) -> float:
    """Seconds the next harness call may take before a wall or GPU cap would be crossed."""
    budget = ctx.config.budget
    left = ctx.config.eval_timeout_s
    if budget.wall_s is not None:
        left = min(left, budget.wall_s - ctx.elapsed())
    if budget.gpu_s is not None:
        left = min(left, budget.gpu_s - state.get("gpu_s", 0.0))
    return max(1.0, left)
