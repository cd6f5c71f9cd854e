"""The optimization graph, wiring only: baseline -> judge, then planner -> coder -> judge
(one candidate per step) -> profiler (kept ones) -> planner, until a cap or stop condition sends it to verify (the
best re-evaluated with the full protocol) and the end.

Each node returns a Command naming its successor, so the routing lives next to the decision
(stopping.py holds the caps) and the edges below are the only possible paths.
"""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.context import RunContext
from agents.nodes.baseline import baseline
from agents.nodes.coder import coder
from agents.nodes.judge import judge
from agents.nodes.planner import planner
from agents.nodes.profiler import profiler
from agents.nodes.verify import verify
from agents.state import OptimizeState


def build_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    builder = StateGraph(OptimizeState, context_schema=RunContext)
    builder.add_node("baseline", baseline)
    builder.add_node("planner", planner)
    builder.add_node("coder", coder)
    builder.add_node("judge", judge)
    builder.add_node("profiler", profiler)
    builder.add_node("verify", verify)
    builder.add_edge(START, "baseline")
    return builder.compile(checkpointer=checkpointer, name="kernelforge-optimizer")
