"""finish: the search has stopped; verify the best challenger within the reserve, and end.

The challenger is the fastest screened render not verified yet that would beat the best, or
ties it within the screen's slack and could win (agents/tiers.py); it gets the full protocol
in the time kept back for it from the start (agents/stopping.py), through the same judge as
every attempt. While the time left still covers a whole verification (a search that stopped
on a plateau or out of ideas leaves some), the next challenger gets one too: near ties are
ranked by the screen's noise, and only the full protocol tells them apart. Then the run's
outcome: the verified best when it beats the fastest baseline beyond noise, else the baseline
and why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import stopping, tiers
from agents.context import RunContext
from agents.evaluator import end_search
from agents.nodes.judge import recorded, run_attempt
from agents.nodes.screen import prefetch_challenger
from agents.reporting import FinalStep, SearchStats
from agents.state import OptimizeState, Pending, Screened, StopReason, Tier
from harness.screen import ScreenPoint, render

# At most this many verifications at the finish: what a search that stopped early leaves is
# spent on the next near ties, but a long budget's rest is not spent verifying them all.
FINAL_VERIFICATIONS = 3


def finish(state: OptimizeState, runtime: Runtime[RunContext]) -> Command[Literal["__end__"]]:
    ctx = runtime.context
    if state.get("outcome") is not None:  # a finished thread, resumed
        return Command(goto="__end__", update={"elapsed_s": ctx.elapsed()})
    update: dict[str, Any] = {"pending": [], "plan": None}
    broken = state.get("stop_reason") in (StopReason.CANCELLED, StopReason.HARNESS_ERRORS)
    end_search(ctx.evaluator)
    final = FinalStep(stopped_s=ctx.elapsed(), reserve_s=stopping.kept_back(state, ctx))
    after: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    while (
        not broken
        and final.verified < FINAL_VERIFICATIONS
        and not ctx.reporter.cancel_requested()
        and not _capped(after, ctx)
    ):
        challenger = tiers.challenger(after, ctx.config)
        if challenger is None:
            break
        timeout = stopping.final_timeout(after, ctx)
        if final.verified == 0:
            # The first may use the reserve kept for it, and starts if it likely fits.
            final = replace(final, timeout_s=timeout, verdict="no time was left for it")
            if timeout < 0.5 * stopping.verify_estimate(after, ctx):
                break
        elif timeout < stopping.reserve(after, ctx):  # a further one only if it surely fits
            break
        left_after = timeout - stopping.verify_estimate(after, ctx)
        if final.verified + 1 < FINAL_VERIFICATIONS and left_after >= stopping.reserve(after, ctx):
            # Another may follow: the next one compiles on the CPU while the GPU verifies this.
            seen = {**after.get("seen", {}), challenger["candidate_id"]: -1}
            prefetch_challenger(ctx, {**after, "seen": seen})  # type: ignore[typeddict-item]
        began = ctx.elapsed()
        attempt, tier_runs = run_attempt(after, ctx, _final_item(after, ctx, challenger))
        evaluation = attempt.evaluation
        if final.verified == 0:
            final = replace(
                final,
                wall_s=ctx.elapsed() - began,
                harness_s=evaluation.duration_s if evaluation else 0.0,
                verdict=evaluation.verdict.value if evaluation else attempt.reason,
            )
        final = replace(final, verified=final.verified + 1)
        update.update(recorded(after, ctx, attempt, tier_runs))
        after = {**state, **update}  # type: ignore[typeddict-item]
    result = tiers.outcome(after, ctx.config, _why_none(after, ctx))
    stats = SearchStats.from_dict(after.get("stats") or {})
    stats.outcome, stats.outcome_reason = result.kind, result.reason
    stats.elapsed_s, stats.final = ctx.elapsed(), final
    ctx.reporter.search(stats)
    update.update(outcome=result.to_dict(), stats=stats.to_dict(), elapsed_s=ctx.elapsed())
    return Command(goto="__end__", update=update)


def _capped(state: OptimizeState, ctx: RunContext) -> bool:
    cap = ctx.config.budget.max_attempts
    return cap is not None and state.get("next_index", 0) >= cap


def _final_item(state: OptimizeState, ctx: RunContext, challenger: Screened) -> Pending:
    best = state.get("best")
    bar = tiers.best_screen_speedup(best)
    vs_best = f"; the best screened {bar:.3f}x" if bar else ""
    _, source = render(ctx.problem, ScreenPoint(challenger["family"], challenger["params"]))
    return Pending(
        source=source,
        family=challenger["family"],
        params=dict(challenger["params"]),
        hypothesis=(
            f"the search stopped ({state.get('stop_reason')}): verify the fastest "
            f"screened candidate not verified yet ({challenger['family']}, "
            f"{challenger['speedup']:.3f}x GPU time vs the baseline{vs_best}) with the full "
            "protocol, in the time left"
        ),
        parent=best["index"] if best else None,
        origin=f"family:{challenger['family']}",
        tier=Tier.VERIFY.value,
        screen_speedup=challenger["speedup"],
        llm_tokens=0,
        llm_cost_usd=0.0,
        error="",
    )


def _why_none(state: OptimizeState, ctx: RunContext) -> str:
    """Why no candidate is verified, in words (used only when none is)."""
    if state.get("stop_reason") == StopReason.CANCELLED:  # not a budget that ran short
        return "cancelled before a candidate was fully verified"
    verified = [r for r in state.get("history", []) if r["tier"] == Tier.VERIFY.value]
    if verified:
        counts = Counter(r["verdict"] for r in verified)
        shown = ", ".join(f"{n} {v}" for v, n in counts.most_common())
        return f"none of the {len(verified)} fully verified candidates passed ({shown})"
    estimate = stopping.verify_estimate(state, ctx)
    screened = state.get("screened", {}).values()
    if screened and not any(s["speedup"] for s in screened):
        return "no candidate passed the screen within the budget"
    return f"no full verification fit in the budget left (one takes ~{estimate:.0f} s)"
