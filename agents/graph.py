"""The optimization graph, wiring only:

    planner -> screen (tier one: renders of our families) -> judge (tier two: finalists, one
    per step) -> profiler (new bests) -> planner ...
    planner -> coder (an LLM rewrite) -> judge (its check, then tier two if it would be best)
    any stop condition -> finish (the last verifications: the reserve, then the time left) -> end

Each node returns a Command naming its successor, so the routing lives next to the decision
(stopping.py holds the caps) and the edges below are the only possible paths.
"""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.context import RunContext
from agents.nodes.coder import coder
from agents.nodes.finish import finish
from agents.nodes.judge import judge
from agents.nodes.planner import planner
from agents.nodes.profiler import profiler
from agents.nodes.screen import screen
from agents.state import OptimizeState


def build_graph(
    checkpointer: BaseCheckpointSaver | None = None,
) -> CompiledStateGraph[OptimizeState, RunContext, OptimizeState, OptimizeState]:
    builder = StateGraph(OptimizeState, context_schema=RunContext)
    builder.add_node("planner", planner)
    builder.add_node("screen", screen)
    builder.add_node("coder", coder)
    builder.add_node("judge", judge)
    builder.add_node("profiler", profiler)
    builder.add_node("finish", finish)
    builder.add_edge(START, "planner")
    return builder.compile(checkpointer=checkpointer, name="kernelforge-optimizer")
