"""The public entry point: run (or resume) one optimization and return its typed result."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from agents.checkpoint import open_checkpointer
from agents.config import OptimizeConfig
from agents.context import RunContext
from agents.evaluator import Evaluator, HarnessEvaluator, compile_stats
from agents.graph import build_graph
from agents.reporting import AttemptVerdict, IterationEvent, Reporter
from agents.state import OptimizeState, Record
from kernels import get_op
from kernels.problem import Problem

RECURSION_LIMIT = 1_000_000  # the caps in stopping.py end the loop, not LangGraph's step cap


@dataclass
class OptimizeResult:
    thread_id: str
    stop_reason: str
    best: IterationEvent | None  # the best verified candidate, source included
    history: list[Record]  # every attempt, baseline first
    attempts: int
    evaluated: int  # attempts that reached the harness
    elapsed_s: float
    gpu_s: float
    llm_tokens: int
    llm_cost_usd: float
    resumed: bool  # this call continued a thread that had checkpoints
    verified: bool | None = None  # the best passed the full-protocol re-evaluation (None: not run)
    final_speedups: dict[str, float] = field(default_factory=dict)  # from that re-evaluation
    notes: list[str] = field(default_factory=list)
    # Compiling ahead (agents/evaluator.py CompileStats) in this process; {} when not kept.
    compile: dict[str, Any] = field(default_factory=dict)

    @property
    def candidates_per_gpu_hour(self) -> float | None:
        """Candidates evaluated per hour of harness time (evaluate + profile, summed)."""
        return self.evaluated / (self.gpu_s / 3600.0) if self.gpu_s > 0 else None

    @property
    def candidates_per_wall_hour(self) -> float | None:
        """Per hour of the run's wall time: planning, profiling, verify and waits included."""
        return self.evaluated / (self.elapsed_s / 3600.0) if self.elapsed_s > 0 else None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for record in self.history:
            out[record["verdict"]] = out.get(record["verdict"], 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "stop_reason": self.stop_reason,
            "best": self.best.to_dict() if self.best else None,
            "attempts": self.attempts,
            "evaluated": self.evaluated,
            "verdicts": self.counts(),
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
) -> OptimizeResult:
    """Optimize `problem` within `config`'s caps, reporting every attempt to `reporter`.

    With the same thread_id and checkpointer_url, a call after a crash resumes from the last
    finished step (indexes already reported are not reported again), and a call on a thread
    that already finished returns its result without running anything.
    """
    op = get_op(problem.op)
    op.validate(problem)
    thread_id = thread_id or f"local-{uuid.uuid4().hex[:12]}"
    evaluator: Evaluator = config.evaluator or HarnessEvaluator(config)
    run_config: dict[str, Any] = {
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
            ctx.reported.update(range(int(values.get("next_index", 0))))
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
        to_profile=None,
        profiles={},
        latest_profile=None,
        next_index=0,
        elapsed_s=0.0,
        gpu_s=0.0,
        llm_tokens=0,
        llm_cost_usd=0.0,
        not_kept_in_row=0,
        planner_steps=0,
        eval_seconds=[],
        stop_reason=None,
        final=None,
        notes=[],
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
    final = state.get("final") or {}
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
            evaluation=final.get("evaluation"),  # the full-protocol run, when there was one
            speedup=best["speedup"],
            best_speedup=best["speedup"],
            gpu_s=record["gpu_s"],
        )
    not_run = {AttemptVerdict.ERROR.value}
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
        verified=final.get("verified") if final else None,
        final_speedups=dict(final.get("speedups") or {}),
        notes=list(state.get("notes", []))
        + ([f"final verification: {final['error']}"] if final.get("error") else []),
    )
