"""Test doubles for the two edges the graph has: the GPU (an evaluator) and the outside world
(a reporter). The LLM is never faked here: LLM tests talk HTTP to fake_llm_server."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agents.reporting import IterationEvent
from harness.results import (
    Bottleneck,
    Candidate,
    CompileResult,
    Evaluation,
    Profile,
    Regime,
    Timings,
    TimingStats,
    Verdict,
)
from kernels.problem import Problem

_CONST = re.compile(r"^([A-Z_][A-Z0-9_]*)\s*=\s*(.+)$", re.M)


def constants(source: str) -> dict[str, Any]:
    """The module-level UPPER_CASE constants a family rendered (its parameter point)."""
    found = {}
    for name, value in _CONST.findall(source):
        try:
            found[name] = json.loads(
                value.strip().replace("'", '"').replace("True", "true").replace("False", "false")
            )
        except ValueError:
            found[name] = value.strip()
    return found


class FakeEvaluator:
    """Scores a candidate with `score(source) -> speedup | Verdict`; no GPU, no subprocess."""

    def __init__(
        self,
        score: Callable[[str], float | Verdict],
        *,
        noise: float = 0.01,
        crash_at_call: int | None = None,
        bottleneck: Bottleneck = Bottleneck.COMPUTE,
    ) -> None:
        self.score = score
        self.noise = noise
        self.crash_at_call = crash_at_call
        self.bottleneck = bottleneck
        self.calls: list[str] = []
        self.profiled: list[str] = []
        self.prefetched: list[str] = []
        self.verified: list[str] = []  # full-protocol re-evaluations (the verify node)

    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        if full:
            self.verified.append(candidate.id)
        else:
            self.calls.append(candidate.id)
        if self.crash_at_call is not None and len(self.calls) == self.crash_at_call:
            os._exit(3)  # a worker dying mid-evaluation: no cleanup, no finally blocks
        result = self.score(candidate.source)
        if isinstance(result, Verdict):
            return Evaluation(
                candidate.id,
                problem.key,
                result,
                CompileResult(result is not Verdict.COMPILE_ERROR),
                error=f"scripted {result.value}",
                duration_s=0.01,
            )
        base_us = 100.0
        stats = TimingStats(
            base_us / result, 1.0, base_us / result, base_us / result, 7, self.noise
        )
        timings = Timings(
            Regime.INTERPRETER, "fake", stats, speedups={"torch": result}, noise=self.noise
        )
        return Evaluation(
            candidate.id,
            problem.key,
            Verdict.PASSED,
            CompileResult(True),
            timings=timings,
            duration_s=0.01,
        )

    def profile(self, candidate: Candidate, problem: Problem, *, timeout_s: float) -> Profile:
        self.profiled.append(candidate.id)
        n = len(self.profiled)
        return Profile(
            candidate.id, problem.key, {"sm_pct": 40.0 + n, "dram_pct": 20.0}, self.bottleneck
        )

    def prefetch(self, candidates: Sequence[Candidate], problem: Problem) -> None:
        self.prefetched.extend(c.id for c in candidates)

    def close(self) -> None:
        return None


class ListReporter:
    """Collects events in memory; optionally also appends them as JSON lines to a file, and
    asks to cancel after a given number of iterations."""

    def __init__(self, path: Path | None = None, *, cancel_after: int | None = None) -> None:
        self.events: list[IterationEvent] = []
        self.profiles: list[int] = []
        self.started_calls = 0
        self.finished_with: tuple[IterationEvent | None, str] | None = None
        self.errors: list[str] = []
        self.path = path
        self.cancel_after = cancel_after

    def started(self, *, problem: Problem, budget: dict[str, Any]) -> None:
        self.started_calls += 1

    def iteration(self, event: IterationEvent) -> None:
        self.events.append(event)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(event.to_dict(), default=str) + "\n")

    def profile(self, *, index: int, profile: dict[str, Any]) -> None:
        self.profiles.append(index)

    def finished(self, *, best: IterationEvent | None, stop_reason: str) -> None:
        self.finished_with = (best, stop_reason)

    def failed(self, *, error: str) -> None:
        self.errors.append(error)

    def cancel_requested(self) -> bool:
        return self.cancel_after is not None and len(self.events) >= self.cancel_after

    @property
    def indexes(self) -> list[int]:
        return [e.index for e in self.events]


def block_m_score(source: str) -> float | Verdict:
    """Bigger BLOCK_M is faster; BLOCK_M=16 'fails to compile'; split-K is 'incorrect'."""
    params = constants(source)
    if "SPLIT_K" in params:
        return Verdict.INCORRECT
    block_m = int(params.get("BLOCK_M", 64))
    if block_m == 16:
        return Verdict.COMPILE_ERROR
    return 1.0 + 0.25 * (block_m.bit_length() - 6)
