"""coder: turn the plan into candidate modules.

"params" moves render each family at its point (byte-identical text for the same point, so
the compile cache and the seen-set both hit). "rewrite" moves ask the LLM to edit the best
source; a reply that fails the source checks goes back with the error, within the retry
budget, and one that never passes is recorded as a failed attempt with the reason.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import prompts
from agents.context import RunContext
from agents.source_check import check_source, extract_code
from agents.state import OptimizeState, Pending, StopReason


def coder(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["judge", "planner", "verify"]]:
    ctx = runtime.context
    plan = state.get("plan")
    assert plan is not None, "coder runs only after the planner"
    best = state.get("best")
    parent = best["index"] if best else None
    pending: list[Pending] = []
    if plan["move"] == "params":
        for point in plan["points"]:
            family = ctx.families[point["family"]]
            try:
                source, error = family.render(ctx.problem, point["params"]), ""
            except Exception as exc:  # a family bug must cost one attempt, not the run
                source, error = "", f"render failed: {type(exc).__name__}: {exc}"
            pending.append(
                Pending(
                    source=source,
                    family=family.name,
                    params=dict(point["params"]),
                    hypothesis=point.get("hypothesis") or plan["hypothesis"],
                    parent=parent,
                    origin=f"family:{family.name}",
                    llm_tokens=0,
                    llm_cost_usd=0.0,
                    error=error,
                )
            )
    else:
        from agents.llm import LLMError, LLMErrorKind

        assert ctx.llm is not None
        before = (ctx.llm.spent.tokens, ctx.llm.spent.cost_usd)
        try:
            pending.append(llm_rewrite(state, ctx))
        except LLMError as exc:
            if exc.kind is LLMErrorKind.BUDGET:
                return Command(goto="verify", update=_stop_update(ctx, exc))
            failed = _failed(
                plan["hypothesis"], parent, ctx, str(exc), best["source"] if best else ""
            )
            failed["llm_tokens"] = ctx.llm.spent.tokens - before[0]
            failed["llm_cost_usd"] = ctx.llm.spent.cost_usd - before[1]
            pending.append(failed)
    # The planner's LLM spend travels with the batch's first candidate.
    if pending:
        pending[0]["llm_tokens"] += plan["llm_tokens"]
        pending[0]["llm_cost_usd"] += plan["llm_cost_usd"]
    update: dict[str, Any] = {"pending": pending, "plan": None, "elapsed_s": ctx.elapsed()}
    if ctx.llm is not None:
        update.update(llm_tokens=ctx.llm.spent.tokens, llm_cost_usd=ctx.llm.spent.cost_usd)
    return Command(goto="judge" if pending else "planner", update=update)


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
