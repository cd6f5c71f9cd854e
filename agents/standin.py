"""A stand-in agent: the Reporter traffic of an optimization run, with no kernel work behind it.

It exists so the product (queue, worker, database, live page) runs end to end before the real
graph is switched in through workers/agent.py. Every event says plainly that it is a stand-in:
no candidate is generated, compiled, checked or timed, so no speedup is ever reported.
"""

from __future__ import annotations

import time

from agents.reporting import AttemptVerdict, IterationEvent, Reporter
from kernels.problem import Problem

STANDIN_NOTE = "stand-in event: no kernel was generated, compiled, checked or timed"


def run_standin(
    problem: Problem,
    reporter: Reporter,
    *,
    iterations: int,
    pause_s: float,
    resume_from: int = 0,
) -> None:
    """Emit `iterations` events (indexes resume_from..iterations-1), `pause_s` apart.

    `resume_from` lets a re-run after a lost worker continue where the saved events end.
    Polls reporter.cancel_requested() before each step and stops cleanly when it says so.
    """
    started = time.monotonic()
    reporter.started(problem=problem, budget={"iterations": iterations, "agent": "stand-in"})
    for index in range(resume_from, iterations):
        if reporter.cancel_requested():
            reporter.finished(best=None, stop_reason="cancelled")
            return
        if index > resume_from:
            time.sleep(pause_s)
        reporter.iteration(_event(problem, index, elapsed_s=time.monotonic() - started))
    reporter.finished(best=None, stop_reason=f"stand-in finished {iterations} steps")


def _event(problem: Problem, index: int, *, elapsed_s: float) -> IterationEvent:
    baseline = index == 0
    return IterationEvent(
        index=index,
        parent=None if baseline else 0,
        hypothesis=(
            f"[stand-in] baseline placeholder for {problem.key}"
            if baseline
            else f"[stand-in] step {index} for {problem.key}: the real planner's hypothesis goes here"
        ),
        source=f"# {STANDIN_NOTE}\n# problem: {problem.key}, step {index}\n",
        candidate_id=f"standin-{index}",
        verdict=AttemptVerdict.BASELINE if baseline else AttemptVerdict.REVERTED,
        reason=STANDIN_NOTE,
        params={"standin": True},
        elapsed_s=elapsed_s,
    )
