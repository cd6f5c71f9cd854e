"""The public entry point: run (or resume) one optimization and return its typed result."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.checkpoint import open_checkpointer
from agents.config import OptimizeConfig
from agents.context import RunContext
from agents.evaluator import Evaluator, HarnessEvaluator, begin_run, compile_stats
from agents.graph import build_graph
from agents.reporting import AttemptVerdict, IterationEvent, Reporter, SearchStats
from agents.state import OptimizeState, Record
from harness.judge import wins
from kernels import get_op
from kernels.problem import Problem

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

RECURSION_LIMIT = 1_000_000  # the caps in stopping.py end the loop, not LangGraph's step cap


@dataclass
class OptimizeResult:
    thread_id: str
    stop_reason: str
    best: IterationEvent | None  # the best candidate; it passed the full protocol (tier two)
    history: list[Record]  # every judged attempt (screened-only candidates are not attempts)
    attempts: int
    evaluated: int  # attempts that reached the harness
    elapsed_s: float
    gpu_s: float
    llm_tokens: int
    llm_cost_usd: float
    resumed: bool  # this call continued a thread that had checkpoints
    # "verified": the best beats the fastest baseline beyond noise (ship it); "baseline": it
    # does not, or nothing passed (fall back to PyTorch); outcome_reason says which and why.
    outcome: str = "baseline"
    outcome_reason: str = ""
    verified: bool | None = None  # a best exists: it passed the full protocol (None: no best)
    final_speedups: dict[str, float] = field(default_factory=dict)  # the best's, every baseline
    search: SearchStats = field(default_factory=SearchStats)  # tiers, throughput, time
    notes: list[str] = field(default_factory=list)
    # Compiling ahead of untrusted candidates (agents/evaluator.py CompileStats); {} when none.
    compile: dict[str, Any] = field(default_factory=dict)

    @property
    def candidates_per_gpu_hour(self) -> float | None:
        """Screened and judged candidates per hour of harness time (all tiers together)."""
        n = self.search.screen.candidates + self.evaluated
        return n / (self.gpu_s / 3600.0) if self.gpu_s > 0 else None

    @property
    def candidates_per_wall_hour(self) -> float | None:
        n = self.search.screen.candidates + self.evaluated
        return n / (self.elapsed_s / 3600.0) if self.elapsed_s > 0 else None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for record in self.history:
            out[record["verdict"]] = out.get(record["verdict"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "stop_reason": self.stop_reason,
            "outcome": self.outcome,
            "outcome_reason": self.outcome_reason,
            "best": self.best.to_dict() if self.best else None,
            "attempts": self.attempts,
            "evaluated": self.evaluated,
            "verdicts": self.counts(),
            **self.search.to_dict(),
            "elapsed_s": self.elapsed_s,
            "gpu_s": self.gpu_s,
            "candidates_per_gpu_hour": self.candidates_per_gpu_hour,
            "candidates_per_wall_hour": self.candidates_per_wall_hour,
            "compile_s_saved": self.compile.get("compile_s_saved"),
            "compile": self.compile,
            "llm_tokens": self.llm_tokens,
            "llm_cost_usd": self.llm_cost_usd,
            "resumed": self.resumed,
            "verified": self.verified,
            "final_speedups": self.final_speedups,
            "notes": self.notes,
        }


def optimize(
    problem: Problem,
    config: OptimizeConfig,
    reporter: Reporter,
    *,
    thread_id: str | None = None,
    checkpointer_url: str | None = None,
    started_at: float | None = None,
) -> OptimizeResult:
    """Optimize `problem` within `config`'s caps, reporting every attempt to `reporter`.

    With the same thread_id and checkpointer_url, a call after a crash resumes from the last
    finished step (indexes already reported are not reported again), and a call on a thread
    that already finished returns its result without running anything. `started_at`
    (time.monotonic()) starts the wall-time clock earlier than this call, e.g. at process start.
    """
    op = get_op(problem.op)
    op.validate(problem)
    thread_id = thread_id or f"local-{uuid.uuid4().hex[:12]}"
    evaluator: Evaluator = config.evaluator or HarnessEvaluator(config)
    run_config: RunnableConfig = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": RECURSION_LIMIT,
    }
    try:
        with open_checkpointer(checkpointer_url) as saver:
            graph = build_graph(saver)
            snapshot = graph.get_state(run_config)
            values: OptimizeState = snapshot.values or {}  # type: ignore[assignment]
            resumed = bool(values)
            if resumed and values.get("problem") != problem.to_dict():
                raise ValueError(
                    f"thread {thread_id!r} holds a different problem: {values.get('problem')}"
                )
            ctx = RunContext(
                config=config,
                problem=problem,
                op=op,
                evaluator=evaluator,
                reporter=reporter,
                llm=_llm_client(config, values),
                elapsed_before=float(values.get("elapsed_s", 0.0)),
            )
            if started_at is not None:
                ctx.started = started_at
            ctx.reported.update(range(int(values.get("next_index", 0))))
            wall = config.budget.wall_s
            end = ctx.started + wall - ctx.elapsed_before if wall is not None else math.inf
            begin_run(evaluator, problem, deadline_at=min(end, time.monotonic() + 86400.0))
            if not resumed:
                reporter.started(problem=problem, budget=config.budget.to_dict())
            if not resumed or snapshot.next:
                graph.invoke(
                    None if resumed else _initial(problem),
                    run_config,
                    context=ctx,
                    durability="sync",
                )
            final: OptimizeState = graph.get_state(run_config).values  # type: ignore[assignment]
            stats = compile_stats(evaluator)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            reporter.failed(error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if config.evaluator is None:
            evaluator.close()
    result = _result(final, thread_id, resumed)
    result.compile = stats
    reporter.finished(best=result.best, stop_reason=result.stop_reason)
    return result


def _initial(problem: Problem) -> OptimizeState:
    return OptimizeState(
        problem=problem.to_dict(),
        history=[],
        seen={},
        best=None,
        plan=None,
        pending=[],
        screened={},
        queued=[],
        to_profile=None,
        profiles={},
        latest_profile=None,
        next_index=0,
        elapsed_s=0.0,
        gpu_s=0.0,
        llm_tokens=0,
        llm_cost_usd=0.0,
        rounds_without_gain=0,
        planner_steps=0,
        verify_seconds=[],
        stats=SearchStats().to_dict(),
        stop_reason=None,
        outcome=None,
        notes=[],
        llm_carry=[0, 0.0],
    )


def _llm_client(config: OptimizeConfig, values: OptimizeState) -> Any:
    if not config.uses_llm:
        return None
    from agents.llm import LLMClient  # litellm is imported only when an LLM is configured

    return LLMClient(
        config.llm,
        max_tokens=config.budget.llm_tokens,
        max_cost_usd=config.budget.llm_cost_usd,
        spent_tokens=int(values.get("llm_tokens", 0)),
        spent_cost_usd=float(values.get("llm_cost_usd", 0.0)),
    )


def _result(state: OptimizeState, thread_id: str, resumed: bool) -> OptimizeResult:
    history = list(state.get("history", []))
    best = state.get("best")
    outcome = state.get("outcome") or {}
    best_event = None
    if best is not None:
        record = next(r for r in history if r["index"] == best["index"])
        best_event = IterationEvent(
            index=best["index"],
            parent=record["parent"],
            hypothesis=record["hypothesis"],
            source=best["source"],
            candidate_id=best["candidate_id"],
            verdict=AttemptVerdict(record["verdict"]),
            reason=record["reason"],
            family=best["family"],
            params=best["params"],
            evaluation=best["evaluation"],  # its full-protocol evaluation
            speedup=best["speedup"],
            best_speedup=best["speedup"],
            gpu_s=record["gpu_s"],
            tier=record["tier"],
            screen_speedup=best["screen_speedup"],
            beats_baselines=wins.of_timings(best["evaluation"].get("timings")).beats,
        )
    not_run = {AttemptVerdict.INFRA_ERROR.value}
    evaluated = sum(
        1
        for r in history
        if r["verdict"] not in not_run and not r["reason"].startswith("same source as")
    )
    return OptimizeResult(
        thread_id=thread_id,
        stop_reason=state.get("stop_reason") or "unknown",
        best=best_event,
        history=history,
        attempts=len(history),
        evaluated=evaluated,
        elapsed_s=float(state.get("elapsed_s", 0.0)),
        gpu_s=float(state.get("gpu_s", 0.0)),
        llm_tokens=int(state.get("llm_tokens", 0)),
        llm_cost_usd=float(state.get("llm_cost_usd", 0.0)),
        resumed=resumed,
        outcome=str(outcome.get("kind", "baseline")),
        outcome_reason=str(outcome.get("reason", "")),
        verified=True if best is not None else None,
        final_speedups=dict(best["speedups"]) if best is not None else {},
        search=SearchStats.from_dict(state.get("stats") or {}),
        notes=list(state.get("notes", [])),
    )
