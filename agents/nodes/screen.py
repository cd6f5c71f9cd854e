"""screen: tier one for renders of our own families, then the hand-off to tier two.

The plan's new points go to the evaluator's screen, which starts compiling them on every CPU
core and screens whatever has compiled so far in one warm child (harness/screen.py); points
still compiling are screened in a later round. Every screened point is kept (its family, point
and numbers) for the planner's surrogate. Of the round's ranking, the finalists
(agents/tiers.py) are rendered again here, byte-identical, and handed to the judge for the full
protocol; nothing the screen saw can become the best without it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import stopping, tiers
from agents.context import RunContext
from agents.evaluator import prefetch_final
from agents.reporting import SearchStats
from agents.state import OptimizeState, Pending, Screened, Tier
from harness.results import Regime
from harness.screen import ScreenPoint, render

ROUND_S = 90.0  # a round waits at most this long for compiles: finalists get verified early
MIN_READY = 8  # ... or until this many points have compiled (fewer when fewer are queued)


def screen(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["judge", "planner", "finish"]]:
    ctx = runtime.context
    plan = state.get("plan")
    assert plan is not None and plan["move"] == "screen"
    new = [ScreenPoint(p["family"], p["params"]) for p in plan["points"]]
    # Each point keeps its own reason (the planner's, else the plan's) while it waits: the
    # attempt it may lead to names that point's family and change (issue 17).
    queued = [
        *state.get("queued", []),
        *(
            {**point.to_dict(), "hypothesis": p.get("hypothesis") or plan["hypothesis"]}
            for point, p in zip(new, plan["points"], strict=True)
        ),
    ]
    update: dict[str, Any] = {"plan": None}
    # The first round is begun in whatever time is left: without it there is nothing to verify.
    first = not state.get("screened")
    reason = stopping.stop_reason(state, ctx, step_s=0.0 if first else stopping.screen_round_s(ctx))
    if reason is not None:
        update.update(stop_reason=reason.value, queued=queued, elapsed_s=ctx.elapsed())
        return Command(goto="finish", update=update)
    if not queued:
        return Command(goto="planner", update={**update, "elapsed_s": ctx.elapsed()})
    left = stopping.left_s(state, ctx)
    result = ctx.evaluator.screen(
        _points(state, new, ctx),
        ctx.problem,
        timeout_s=min(ROUND_S, stopping.screen_timeout(state, ctx)),
        run_left_s=left if math.isfinite(left) else 86400.0,
        min_ready=min(len(queued), max(MIN_READY, ctx.config.screen_batch // 3)),
    )
    screened = dict(state.get("screened", {}))
    for e in result.entries:
        screened[e.key] = Screened(
            family=e.family,
            params=dict(e.params),
            candidate_id=e.candidate_id,
            verdict=e.verdict.value,
            speedup=e.speedup,
            noise=e.noise,
            rounds=e.rounds,
            verified=None,
            why=tiers.screen_why(e),
        )
    ranked = result.ranked()
    stats = tiers.counted(
        state.get("stats") or {},
        Tier.SCREEN.value,
        candidates=result.timed,
        passed=len(ranked),
        gpu_s=result.gpu_s,
        compile_s=result.compile_s,
        compile_wait_s=result.compile_wait_s,
        pending_compile=result.pending,
    )
    stats["families"] = tiers.by_family(screened)
    update.update(
        screened=screened,
        queued=[q for q in queued if ScreenPoint(q["family"], q["params"]).key not in screened],
        gpu_s=state.get("gpu_s", 0.0) + result.gpu_s,
        stats={**stats, "time_s": {**stats["time_s"], "wall": round(ctx.elapsed(), 2)}},
        elapsed_s=ctx.elapsed(),
    )
    if result.error:
        update["notes"] = [*state.get("notes", []), f"screen: {result.error[:1500]}"]
    ctx.reporter.search(SearchStats.from_dict(update["stats"]))
    after: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    prefetch_challenger(ctx, after)
    estimate = stopping.verify_estimate(after, ctx)
    slots = (
        int(stopping.search_left(after, ctx) // estimate) if estimate > 0 else ctx.config.finalists
    )
    best = state.get("best")
    why = {ScreenPoint(q["family"], q["params"]).key: q.get("hypothesis", "") for q in queued}
    pending = [
        _finalist(ctx, e, best["index"] if best else None, why.get(e.key, ""))
        for e in tiers.finalists(
            after,
            ranked,
            ctx.config,
            slots=max(0, slots),
            gpu_timed=result.regime is not Regime.INTERPRETER,
        )
    ]
    tokens, cost = state.get("llm_carry", [0, 0.0])
    tokens, cost = tokens + plan["llm_tokens"], cost + plan["llm_cost_usd"]
    if pending:  # the plans' LLM spend travels with the first attempt they led to
        pending[0]["llm_tokens"] += int(tokens)
        pending[0]["llm_cost_usd"] += cost
        tokens, cost = 0, 0.0
    update["llm_carry"] = [tokens, cost]
    if pending:
        return Command(goto="judge", update={**update, "pending": pending})
    update["rounds_without_gain"] = state.get("rounds_without_gain", 0) + (1 if ranked else 0)
    after = {**state, **update}  # type: ignore[typeddict-item]
    reason = stopping.stop_reason(after, ctx, step_s=stopping.screen_round_s(ctx))
    if reason is not None:
        update["stop_reason"] = reason.value
        return Command(goto="finish", update=update)
    return Command(goto="planner", update=update)


def prefetch_challenger(ctx: RunContext, state: OptimizeState) -> None:
    """The screened point the finish would verify now gets compiled ahead at the full
    protocol's shapes (agents/evaluator.py prefetch_final): the final verification, the one
    every run makes, then finds its compiles done."""
    challenger = tiers.challenger(state, ctx.config)
    if challenger is None or not ctx.config.full_protocol:
        return
    family, params = challenger["family"], challenger["params"]
    _, source = render(ctx.problem, ScreenPoint(family, params))
    candidate = ctx.candidate(source, family, f"family:{family}", params)
    prefetch_final(ctx.evaluator, candidate, ctx.problem)


def _points(state: OptimizeState, new: list[ScreenPoint], ctx: RunContext) -> list[ScreenPoint]:
    """The new points, plus (once per process, after a resume) the ones queued before it:
    the evaluator that was compiling them is gone."""
    if ctx.screen_resumed:
        return new
    ctx.screen_resumed = True
    before = [ScreenPoint(q["family"], q["params"]) for q in state.get("queued", [])]
    return [*before, *new]


def _finalist(ctx: RunContext, entry, parent: int | None, why: str) -> Pending:
    _, source = render(ctx.problem, ScreenPoint(entry.family, entry.params))
    finalist = (
        f"screen finalist: {entry.speedup:.3f}x GPU time vs the baseline after "
        f"{entry.rounds} halving round(s); verify it with the full protocol"
    )
    return Pending(
        source=source,
        family=entry.family,
        params=dict(entry.params),
        hypothesis=f"{why} ({finalist})" if why else finalist,
        parent=parent,
        origin=f"family:{entry.family}",
        tier=Tier.VERIFY.value,
        screen_speedup=entry.speedup,
        llm_tokens=0,
        llm_cost_usd=0.0,
        error="",
    )
