"""judge: code, not an LLM. Evaluate one candidate, keep it or revert, record why (P10).

A candidate is kept only if it passed tier two, the harness's full protocol (compiled, correct
on every stage, no cheat found, plausible, every baseline), and its speedup against the
baseline, timed in that same harness run, beats the best's by more than the larger of the two
runs' measured noise and config.min_gain. Ties keep the incumbent. A screen finalist (a render
of our families) goes straight to tier two; untrusted code is checked with the sandboxed quick
protocol first and verified only when it would become the best (agents/tiers.py).

One candidate per step, so a crash loses at most the one in flight; the rest of the pending
list is handed to the evaluator to compile ahead meanwhile. `run_attempt` builds the one
Attempt record (agents/attempt.py); `recorded` turns it into the state update; the finish node
uses both for the last verification.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import stopping
from agents.attempt import Attempt
from agents.config import OptimizeConfig
from agents.context import RunContext
from agents.reporting import AttemptVerdict
from agents.state import Best, OptimizeState, Pending, Tier
from agents.tiers import counted, still_a_finalist
from harness.results import Evaluation, Regime, Verdict


@dataclass(frozen=True)
class Decision:
    verdict: AttemptVerdict
    reason: str
    speedup: float | None


def decide(evaluation: Evaluation, best: Best | None, config: OptimizeConfig) -> Decision:
    if evaluation.verdict is not Verdict.PASSED:
        reason = evaluation.error or evaluation.verdict.value
        return Decision(AttemptVerdict.of(evaluation.verdict), _one_line(reason), None)
    if evaluation.implausible:
        return Decision(
            AttemptVerdict.CHEAT, "faster than the measured roof allows (implausible)", None
        )
    speedup = evaluation.speedup(config.baseline)
    if speedup is None or evaluation.timings is None:
        return Decision(
            AttemptVerdict.REVERTED, f"correct but not timed against {config.baseline}", None
        )
    noise = evaluation.timings.noise
    # Interpreter ratios are CPU emulation vs torch on the CPU (~0.001x): say so.
    where = " (CPU interpreter)" if evaluation.timings.regime is Regime.INTERPRETER else ""
    if best is None:
        return Decision(
            AttemptVerdict.KEPT,
            f"first verified candidate: {_x(speedup)} vs {config.baseline}{where}",
            speedup,
        )
    threshold = max(noise, best["noise"], config.min_gain)
    gain = speedup / best["speedup"] - 1.0
    if gain > threshold:
        reason = f"{_x(speedup)} beats best {_x(best['speedup'])} by {gain:+.1%} (> noise {threshold:.1%}){where}"
        return Decision(AttemptVerdict.KEPT, reason, speedup)
    # A loss is called a loss: "-96.8%, not above noise" read as a tie (issue 27).
    if gain < 0:
        reason = f"{_x(speedup)} is slower than best {_x(best['speedup'])} ({gain:+.1%}){where}"
    else:
        reason = f"{_x(speedup)} vs best {_x(best['speedup'])}: {gain:+.1%}, within noise {threshold:.1%}{where}"
    return Decision(AttemptVerdict.REVERTED, reason, speedup)


def _x(speedup: float) -> str:
    """Three significant digits: at 0.001x, "0.001x beats best 0.001x by +86%" says nothing."""
    return f"{speedup:.3g}x"


def judge(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["judge", "profiler", "planner", "finish"]]:
    ctx = runtime.context
    pending = list(state.get("pending", []))
    item = pending.pop(0)
    _prefetch(ctx, pending)
    attempt, tiers = run_attempt(state, ctx, item)
    update = recorded(state, ctx, attempt, tiers)
    # A finalist the new best now outruns on the screen would buy only a report number: it
    # waits for the finish as a challenger, and the time goes to screening more (on an H100
    # a run stopped at 79 s of 180 because a verification of such a finalist would not fit).
    after_best: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    pending = [p for p in pending if still_a_finalist(p, after_best, ctx.config)]
    update["pending"] = pending
    limit = ctx.config.max_profiles
    if (
        attempt.kept
        and ctx.config.profile
        and (limit is None or len(state.get("profiles", {})) < limit)
    ):
        update["to_profile"] = attempt.index
    after: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    step = stopping.verify_estimate(after, ctx) if pending else stopping.screen_round_s(ctx)
    reason = stopping.stop_reason(after, ctx, step_s=step)
    if reason is not None:
        update["stop_reason"] = reason.value
        return Command(goto="finish", update=update)
    if pending:
        return Command(goto="judge", update=update)
    if after.get("to_profile") is not None:
        return Command(goto="profiler", update=update)
    return Command(goto="planner", update=update)


class TierRun(NamedTuple):
    """One harness call of an attempt: its tier, whether it passed, the harness's duration
    (GPU time, counted against the GPU cap) and the call's wall time (the wait for its compile
    ahead included: what a final verification's reserve has to cover)."""

    tier: str
    passed: bool
    seconds: float
    wall_s: float


def run_attempt(
    state: OptimizeState, ctx: RunContext, item: Pending
) -> tuple[Attempt, list[TierRun]]:
    """Judge one candidate; returns its Attempt and the harness calls it took."""
    index = state.get("next_index", 0)
    best = state.get("best")
    seen = state.get("seen", {})
    candidate = ctx.candidate(item["source"], item["family"], item["origin"], item["params"])
    evaluation: Evaluation | None = None
    tiers: list[TierRun] = []
    if item["error"]:
        decision = Decision(AttemptVerdict.INFRA_ERROR, _one_line(item["error"]), None)
    elif candidate.id in seen:
        decision = Decision(AttemptVerdict.REVERTED, f"same source as #{seen[candidate.id]}", None)
    else:
        two_step = item["tier"] == Tier.CHECK.value and ctx.config.full_protocol
        if two_step:  # untrusted: the sandboxed quick protocol first
            timeout = stopping.step_timeout(state, ctx)
            evaluation, seconds, wall, decision = _evaluate(
                ctx, candidate, best, timeout, full=False
            )
            tiers.append(
                TierRun(Tier.CHECK.value, evaluation is not None and evaluation.ok, seconds, wall)
            )
        if not two_step or decision.verdict is AttemptVerdict.KEPT:
            timeout = stopping.final_timeout(state, ctx) - sum(t.seconds for t in tiers)
            if timeout < 0.5 * stopping.verify_estimate(state, ctx):
                no_time = "no time was left to verify it with the full protocol"
                decision = (
                    Decision(AttemptVerdict.REVERTED, f"{decision.reason}; {no_time}", None)
                    if two_step
                    else Decision(AttemptVerdict.INFRA_ERROR, f"not verified: {no_time}", None)
                )
            else:
                evaluation, seconds, wall, decision = _evaluate(
                    ctx, candidate, best, timeout, full=True
                )
                passed = evaluation is not None and evaluation.ok
                tiers.append(TierRun(Tier.VERIFY.value, passed, seconds, wall))
    kept = decision.verdict is AttemptVerdict.KEPT
    attempt = Attempt(
        index=index,
        item=item,
        candidate_id=candidate.id,
        verdict=decision.verdict,
        reason=decision.reason,
        evaluation=evaluation,
        speedup=decision.speedup,
        best_speedup=decision.speedup if kept else (best["speedup"] if best else None),
        gpu_s=sum(t.seconds for t in tiers),
        elapsed_s=ctx.elapsed(),
    )
    return attempt, tiers


def recorded(
    state: OptimizeState, ctx: RunContext, attempt: Attempt, tiers: list[TierRun]
) -> dict[str, Any]:
    """Report the attempt (once per index) and derive the state update from it."""
    if attempt.index not in ctx.reported:
        ctx.reporter.iteration(attempt.event())
        ctx.reported.add(attempt.index)
    stats = state.get("stats") or {}
    verify_seconds = list(state.get("verify_seconds", []))
    for run in tiers:
        stats = counted(stats, run.tier, candidates=1, passed=int(run.passed), gpu_s=run.seconds)
        if run.tier == Tier.VERIFY.value and attempt.evaluation is not None:
            verify_seconds = [*verify_seconds, max(run.seconds, run.wall_s)][-16:]
    screened = dict(state.get("screened", {}))
    key = _point_key(attempt.item)
    if key in screened:
        screened[key] = {**screened[key], "verified": attempt.index}
    update: dict[str, Any] = {
        "history": [*state.get("history", []), attempt.record()],
        "seen": {**state.get("seen", {}), attempt.candidate_id: attempt.index},
        "screened": screened,
        "next_index": attempt.index + 1,
        "elapsed_s": ctx.elapsed(),
        "gpu_s": state.get("gpu_s", 0.0) + attempt.gpu_s,
        "rounds_without_gain": 0 if attempt.kept else state.get("rounds_without_gain", 0) + 1,
        "verify_seconds": verify_seconds,
        "stats": stats,
    }
    if attempt.kept:
        update["best"] = attempt.best()
    return update


def _evaluate(
    ctx: RunContext, candidate, best: Best | None, timeout: float, *, full: bool
) -> tuple[Evaluation | None, float, float, Decision]:
    """(evaluation, harness seconds, wall seconds of the call, decision)."""
    started = time.monotonic()
    try:
        evaluation = ctx.evaluator.evaluate(candidate, ctx.problem, timeout_s=timeout, full=full)
    except Exception as exc:  # the harness failed, not the candidate
        wall = time.monotonic() - started
        why = f"harness error: {_one_line(str(exc))}"
        return None, wall, wall, Decision(AttemptVerdict.INFRA_ERROR, why, None)
    wall = time.monotonic() - started
    seconds = evaluation.duration_s or wall
    return evaluation, seconds, wall, decide(evaluation, best, ctx.config)


def _point_key(item: Pending) -> str:
    from harness.screen import ScreenPoint

    return ScreenPoint(item["family"] or "", item["params"]).key


def _prefetch(ctx: RunContext, pending: list[Pending]) -> None:
    fresh = [
        ctx.candidate(p["source"], p["family"], p["origin"], p["params"])
        for p in pending
        if not p["error"]
    ]
    fresh = [c for c in fresh if c.id not in ctx.prefetched]
    if fresh:
        ctx.prefetched.update(c.id for c in fresh)
        ctx.evaluator.prefetch(fresh, ctx.problem)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text[:400]
