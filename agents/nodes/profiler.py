"""profiler: profile each new best, so the planner sees what a change did to the metrics (the
delta against the parent's profile goes into the history). Only within the time beyond the
reserve (agents/stopping.py); a profile is advice, never a reason to overrun."""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import stopping
from agents.context import RunContext
from agents.state import OptimizeState
from agents.tiers import counted
from harness.results import Bottleneck, Profile

DIGEST_METRICS = 12  # the planner's prompt gets this many metrics at most (R6.4: compact)
PROFILE_S = 30.0  # one ncu profile of a kernel, start-up included (a guess; it is advice)


def profiler(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["planner", "finish"]]:
    ctx = runtime.context
    best = state.get("best")
    index = state.get("to_profile")
    update: dict[str, Any] = {"to_profile": None}
    fits = stopping.stop_reason(state, ctx, step_s=PROFILE_S) is None
    if best is not None and index == best["index"] and fits:
        candidate = ctx.candidate(best["source"], best["family"], "best", best["params"])
        started = time.monotonic()
        timeout = stopping.step_timeout(state, ctx)
        try:
            profile = ctx.evaluator.profile(candidate, ctx.problem, timeout_s=timeout)
        except Exception as exc:  # profiling is advice: a failure must not stop the search
            profile = Profile(
                candidate.id, ctx.problem.key, {}, Bottleneck.UNKNOWN, error=str(exc)[:400]
            )
        wall = time.monotonic() - started
        digest = digest_profile(profile)
        profiles = dict(state.get("profiles", {}))
        history = [dict(r) for r in state.get("history", [])]
        record = next((r for r in history if r["index"] == index), None)
        parent = record["parent"] if record else None
        if record is not None and parent is not None and str(parent) in profiles:
            record["profile_delta"] = metric_delta(profiles[str(parent)], digest)
        profiles[str(index)] = digest
        ctx.reporter.profile(index=index, profile=profile.to_dict())
        update.update(
            profiles=profiles,
            latest_profile=digest,
            history=history,
            gpu_s=state.get("gpu_s", 0.0) + wall,
            stats=counted(state.get("stats") or {}, "", profile_s=wall),
            elapsed_s=ctx.elapsed(),
        )
    after: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    reason = stopping.stop_reason(after, ctx, step_s=stopping.screen_round_s(ctx))
    if reason is not None:
        update["stop_reason"] = reason.value
        return Command(goto="finish", update=update)
    return Command(goto="planner", update=update)


def digest_profile(profile: Profile) -> dict[str, Any]:
    metrics = {k: v for k, v in profile.metrics.items() if isinstance(v, int | float)}
    return {
        "bottleneck": profile.bottleneck.value,
        "metrics": dict(list(metrics.items())[:DIGEST_METRICS]),
        "stalls": [list(s) for s in profile.stalls[:3]],
        "error": profile.error,
    }


def metric_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    old, new = before.get("metrics") or {}, after.get("metrics") or {}
    return {k: float(new[k]) - float(old[k]) for k in new if k in old and new[k] != old[k]}
