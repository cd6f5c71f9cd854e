"""baseline: the starting candidate, the op's first family at its default point (index 0)."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents.context import RunContext
from agents.state import OptimizeState, Pending


def baseline(state: OptimizeState, runtime: Runtime[RunContext]) -> Command[Literal["judge"]]:
    ctx = runtime.context
    family = ctx.op.families()[0]
    params = family.default(ctx.problem)
    start = Pending(
        source=family.render(ctx.problem, params),
        family=family.name,
        params=params,
        hypothesis=f"baseline: {family.name} at its default point",
        parent=None,
        origin=f"family:{family.name}",
        llm_tokens=0,
        llm_cost_usd=0.0,
        error="",
    )
    return Command(goto="judge", update={"pending": [start], "elapsed_s": ctx.elapsed()})
