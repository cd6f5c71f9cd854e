"""coder: the LLM edits the best source ("rewrite" moves).

Family points never come here: the screen renders them itself (trusted code). What the LLM
writes is untrusted: it goes to the judge as a CHECK (the sandboxed quick protocol, then the
full one if it would be the best). A reply that fails the source checks goes back with the
error, within the retry budget, and one that never passes is recorded as a failed attempt.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import prompts, stopping
from agents.context import RunContext
from agents.source_check import check_source, extract_code
from agents.state import OptimizeState, Pending, StopReason, Tier


def coder(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["judge", "planner", "finish"]]:
    ctx = runtime.context
    plan = state.get("plan")
    assert plan is not None and plan["move"] == "rewrite", "the coder writes rewrites only"
    best = state.get("best")
    parent = best["index"] if best else None
    from agents.llm import LLMError, LLMErrorKind

    assert ctx.llm is not None
    before = (ctx.llm.spent.tokens, ctx.llm.spent.cost_usd)
    ctx.llm.deadline_at = time.monotonic() + stopping.search_left(state, ctx)
    try:
        item = llm_rewrite(state, ctx)
    except LLMError as exc:
        if exc.kind is LLMErrorKind.BUDGET:
            return Command(goto="finish", update=_stop_update(ctx, exc))
        item = _failed(plan["hypothesis"], parent, ctx, str(exc), best["source"] if best else "")
        item["llm_tokens"] = ctx.llm.spent.tokens - before[0]
        item["llm_cost_usd"] = ctx.llm.spent.cost_usd - before[1]
    # The planner's LLM spend (and any earlier plan's not reported yet) travels with it.
    tokens, cost = state.get("llm_carry", [0, 0.0])
    item["llm_tokens"] += plan["llm_tokens"] + int(tokens)
    item["llm_cost_usd"] += plan["llm_cost_usd"] + cost
    update: dict[str, Any] = {
        "pending": [item],
        "plan": None,
        "llm_carry": [0, 0.0],
        "elapsed_s": ctx.elapsed(),
        "llm_tokens": ctx.llm.spent.tokens,
        "llm_cost_usd": ctx.llm.spent.cost_usd,
    }
    return Command(goto="judge", update=update)


def llm_rewrite(state: OptimizeState, ctx: RunContext) -> Pending:
    assert ctx.llm is not None
    plan, best = state["plan"], state.get("best")
    assert plan is not None and best is not None, "a rewrite needs a plan and a best source"
    spec = ctx.op.output_spec(ctx.problem)
    messages = [
        {"role": "system", "content": prompts.CODER_SYSTEM},
        {
            "role": "user",
            "content": prompts.CODER_USER.format(
                problem=ctx.problem.key,
                inputs=", ".join(str(tuple(s)) for s in ctx.op.input_shapes(ctx.problem)),
                output=f"{tuple(spec.shape)} {spec.dtype}",
                request=plan["rewrite"],
                hypothesis=plan["hypothesis"],
                speedup=f"{best['speedup']:.3f}x",
                baseline=ctx.config.baseline,
                source=best["source"],
            ),
        },
    ]
    before_tokens, before_cost = ctx.llm.spent.tokens, ctx.llm.spent.cost_usd

    def parse(reply: str) -> str:
        source = extract_code(reply)
        check_source(source)
        return source

    source = ctx.llm.complete_parsed(messages, parse, retries=ctx.config.llm.reply_retries)
    return Pending(
        source=source,
        family=None,
        params={},
        hypothesis=plan["hypothesis"],
        parent=best["index"],
        origin=f"llm:{ctx.config.llm.model}",
        tier=Tier.CHECK.value,
        screen_speedup=None,
        llm_tokens=ctx.llm.spent.tokens - before_tokens,
        llm_cost_usd=ctx.llm.spent.cost_usd - before_cost,
        error="",
    )


def _failed(
    hypothesis: str, parent: int | None, ctx: RunContext, error: str, source: str
) -> Pending:
    return Pending(
        source=source,
        family=None,
        params={},
        hypothesis=hypothesis,
        parent=parent,
        origin=f"llm:{ctx.config.llm.model}",
        tier=Tier.CHECK.value,
        screen_speedup=None,
        llm_tokens=0,
        llm_cost_usd=0.0,
        error=f"coder: {error}",
    )


def _stop_update(ctx: RunContext, exc: Exception) -> dict[str, Any]:
    reason = StopReason.LLM_TOKENS if "token" in str(exc) else StopReason.LLM_COST
    update: dict[str, Any] = {"stop_reason": reason.value, "plan": None, "elapsed_s": ctx.elapsed()}
    if ctx.llm is not None:
        update.update(llm_tokens=ctx.llm.spent.tokens, llm_cost_usd=ctx.llm.spent.cost_usd)
    return update
