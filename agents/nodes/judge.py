"""judge: code, not an LLM. Evaluate one candidate, keep it or revert, record why (P10).

A candidate is kept only if the harness passed it (compiled, correct on every stage, no cheat
found, plausible) and its speedup against the baseline, timed in the same harness run, beats
the best's by more than the larger of the two runs' measured noise and config.min_gain. Ties
keep the incumbent. One candidate per step, so a crash loses at most the one in flight, and
the rest of the batch is handed to the evaluator to compile ahead meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.config import OptimizeConfig
from agents.context import RunContext
from agents.reporting import AttemptVerdict, IterationEvent
from agents.state import Best, OptimizeState, Pending, Record
from agents.stopping import stop_reason, time_left
from harness.results import Evaluation, Regime, Verdict

_FAILED: dict[Verdict, AttemptVerdict] = {
    Verdict.COMPILE_ERROR: AttemptVerdict.COMPILE_FAILED,
    Verdict.INCORRECT: AttemptVerdict.INCORRECT,
    Verdict.CHEAT: AttemptVerdict.CHEAT,
    Verdict.TIMEOUT: AttemptVerdict.TIMEOUT,
    Verdict.CRASH: AttemptVerdict.CRASH,
    Verdict.INFRA_ERROR: AttemptVerdict.ERROR,
}


@dataclass(frozen=True)
class Decision:
    verdict: AttemptVerdict
    reason: str
    speedup: float | None


def decide(
    evaluation: Evaluation, best: Best | None, config: OptimizeConfig, *, is_first: bool
) -> Decision:
    if evaluation.verdict is not Verdict.PASSED:
        reason = evaluation.error or evaluation.verdict.value
        return Decision(_FAILED[evaluation.verdict], _one_line(reason), None)
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
    if is_first:
        return Decision(
            AttemptVerdict.BASELINE,
            f"starting point: {_x(speedup)} vs {config.baseline}{where}",
            speedup,
        )
    if best is None:
        return Decision(
            AttemptVerdict.KEPT,
            f"first correct candidate: {_x(speedup)} vs {config.baseline}{where}",
            speedup,
        )
    threshold = max(noise, best["noise"], config.min_gain)
    gain = speedup / best["speedup"] - 1.0
    if gain > threshold:
        reason = f"{_x(speedup)} beats best {_x(best['speedup'])} by {gain:+.1%} (> noise {threshold:.1%}){where}"
        return Decision(AttemptVerdict.KEPT, reason, speedup)
    reason = f"{_x(speedup)} vs best {_x(best['speedup'])}: {gain:+.1%}, not above noise {threshold:.1%}{where}"
    return Decision(AttemptVerdict.REVERTED, reason, speedup)


def _x(speedup: float) -> str:
    """Three significant digits: at 0.001x, "0.001x beats best 0.001x by +86%" says nothing."""
    return f"{speedup:.3g}x"


def judge(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["judge", "profiler", "planner", "verify"]]:
    ctx = runtime.context
    pending = list(state.get("pending", []))
    item = pending.pop(0)
    index = state.get("next_index", 0)
    best = state.get("best")
    seen = dict(state.get("seen", {}))
    candidate = ctx.candidate(item["source"], item["family"], item["origin"])
    _prefetch(ctx, pending)

    evaluation: Evaluation | None = None
    wall = 0.0
    if item["error"]:
        decision = Decision(AttemptVerdict.ERROR, _one_line(item["error"]), None)
    elif candidate.id in seen:
        decision = Decision(AttemptVerdict.REVERTED, f"same source as #{seen[candidate.id]}", None)
    else:
        started = time.monotonic()
        try:
            evaluation = ctx.evaluator.evaluate(
                candidate, ctx.problem, timeout_s=time_left(state, ctx)
            )
        except Exception as exc:  # the harness failed, not the candidate
            decision = Decision(AttemptVerdict.ERROR, f"harness error: {_one_line(str(exc))}", None)
        wall = time.monotonic() - started
        if evaluation is not None:
            decision = decide(evaluation, best, ctx.config, is_first=index == 0)
        seen[candidate.id] = index

    kept = decision.verdict in (AttemptVerdict.KEPT, AttemptVerdict.BASELINE)
    if kept:
        assert (
            evaluation is not None
            and evaluation.timings is not None
            and decision.speedup is not None
        )
        best = Best(
            index=index,
            candidate_id=candidate.id,
            source=candidate.source,
            family=item["family"],
            params=item["params"],
            speedup=decision.speedup,
            median_us=evaluation.timings.candidate.median_us,
            noise=evaluation.timings.noise,
            pct_of_roof=evaluation.pct_of_roof,
            evaluation=_summary(evaluation),
        )
    gpu_s = (evaluation.duration_s or wall) if evaluation is not None else wall
    record = Record(
        index=index,
        parent=item["parent"],
        family=item["family"],
        params=item["params"],
        hypothesis=item["hypothesis"],
        verdict=decision.verdict.value,
        reason=decision.reason,
        candidate_id=candidate.id,
        speedup=decision.speedup,
        median_us=evaluation.timings.candidate.median_us
        if evaluation and evaluation.timings
        else None,
        noise=evaluation.timings.noise if evaluation and evaluation.timings else 0.0,
        pct_of_roof=evaluation.pct_of_roof if evaluation else None,
        gpu_s=gpu_s,
        profile_delta={},
    )
    event = IterationEvent(
        index=index,
        parent=item["parent"],
        hypothesis=item["hypothesis"],
        source=candidate.source,
        candidate_id=candidate.id,
        verdict=decision.verdict,
        reason=decision.reason,
        family=item["family"],
        params=item["params"],
        evaluation=evaluation.to_dict() if evaluation is not None else None,
        speedup=decision.speedup,
        best_speedup=best["speedup"] if best else None,
        elapsed_s=ctx.elapsed(),
        gpu_s=gpu_s,
        llm_tokens=item["llm_tokens"],
        llm_cost_usd=item["llm_cost_usd"],
    )
    if index not in ctx.reported:
        ctx.reporter.iteration(event)
        ctx.reported.add(index)

    update: dict[str, Any] = {
        "pending": pending,
        "history": [*state.get("history", []), record],
        "seen": seen,
        "best": best,
        "next_index": index + 1,
        "elapsed_s": ctx.elapsed(),
        "gpu_s": state.get("gpu_s", 0.0) + gpu_s,
        "not_kept_in_row": 0 if kept else state.get("not_kept_in_row", 0) + 1,
        "eval_seconds": _recent(state, max(wall, gpu_s))
        if evaluation
        else state.get("eval_seconds", []),
    }
    limit = ctx.config.max_profiles
    if kept and ctx.config.profile and (limit is None or len(state.get("profiles", {})) < limit):
        update["to_profile"] = index
    after: OptimizeState = {**state, **update}  # type: ignore[typeddict-item]
    reason = stop_reason(after, ctx, needs_gpu=True)
    if reason is not None:
        update["stop_reason"] = reason.value
        return Command(goto="verify", update=update)
    if pending:
        return Command(goto="judge", update=update)
    if after.get("to_profile") is not None:
        return Command(goto="profiler", update=update)
    return Command(goto="planner", update=update)


def _prefetch(ctx: RunContext, pending: list[Pending]) -> None:
    fresh = [
        ctx.candidate(p["source"], p["family"], p["origin"]) for p in pending if not p["error"]
    ]
    fresh = [c for c in fresh if c.id not in ctx.prefetched]
    if fresh:
        ctx.prefetched.update(c.id for c in fresh)
        ctx.evaluator.prefetch(fresh, ctx.problem)


def _recent(state: OptimizeState, seconds: float) -> list[float]:
    return [*state.get("eval_seconds", []), seconds][-16:]


def _summary(evaluation: Evaluation) -> dict[str, Any]:
    """The parts of the best's evaluation the planner reads (roofline numbers, device peaks)."""
    device = evaluation.device
    return {
        "tflops": evaluation.tflops,
        "gbps": evaluation.gbps,
        "pct_of_roof": evaluation.pct_of_roof,
        "device": {
            "name": device.name if device else "",
            "peak_tflops": device.peak_tflops if device else None,
            "peak_gbps": device.peak_gbps if device else None,
        },
    }


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text[:400]
