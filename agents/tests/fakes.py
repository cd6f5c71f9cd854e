"""Test doubles for the two edges the graph has: the GPU (an evaluator) and the outside world
(a reporter). The LLM is never faked here: LLM tests talk HTTP to fake_llm_server."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agents.reporting import IterationEvent, SearchStats
from harness.results import (
    Backend,
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
from harness.screen import ScreenEntry, ScreenPoint, ScreenResult, render
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
    """Scores a candidate with `score(source) -> speedup | Verdict`; no GPU, no subprocess.

    The screen ranks with `screen_score` (default: `score`), so a test can make the screen
    disagree with the full protocol. Harness time is simulated: `screen_s` per screened point,
    `verify_s` per evaluation (both counted, never slept), which the GPU-seconds cap sees. Like
    harness.screen.Screener, a round screens only what fits in its timeout; the rest waits for
    the next round."""

    def __init__(
        self,
        score: Callable[[str], float | Verdict],
        *,
        screen_score: Callable[[str], float | Verdict] | None = None,
        noise: float = 0.01,
        crash_at_call: int | None = None,
        bottleneck: Bottleneck = Bottleneck.COMPUTE,
        screen_s: float = 0.001,
        verify_s: float = 0.01,
        screen_regime: Regime = Regime.INTERPRETER,  # OFFLINE: the screen timed GPU time
        wait_s: float = 0.0,  # slept in every evaluate(), like a wait for its compile ahead
        # A full verification's other baselines: name -> its time over torch's (0.25: 4x faster)
        other_baselines: dict[str, float] | None = None,
        verify_regime: Regime = Regime.INTERPRETER,
    ) -> None:
        self.score = score
        self.screen_regime = screen_regime
        self.screen_score = screen_score or score
        self.noise = noise
        self.crash_at_call = crash_at_call
        self.bottleneck = bottleneck
        self.screen_s = screen_s
        self.screen_min_s = screen_s  # a round is begun when one point fits
        self.verify_s = verify_s
        self.wait_s = wait_s
        self.other_baselines = {"compile": 1.1} if other_baselines is None else other_baselines
        self.verify_regime = verify_regime
        self.calls: list[str] = []  # every evaluate() (quick checks and full verifications)
        self.profiled: list[str] = []
        self.prefetched: list[str] = []
        self.verified: list[str] = []  # full-protocol evaluations (tier two)
        self.finals_ahead: list[tuple[str, int]] = []  # prefetch_final calls
        self.points: list[ScreenPoint] = []  # every point handed to the screen
        self.screened: list[str] = []  # candidate ids the screen ranked
        self.screened_verdicts: list[Verdict] = []  # their screen verdicts
        self.timeouts: list[float] = []  # timeout_s of every evaluate()
        self.waiting: list[ScreenPoint] = []  # handed to the screen, not screened yet
        self.search_ended_at: int | None = None  # evaluations made before end_search()

    def screen(
        self,
        points: Sequence[ScreenPoint],
        problem: Problem,
        *,
        timeout_s: float,
        run_left_s: float,
        min_ready: int,
    ) -> ScreenResult:
        entries: list[ScreenEntry] = []
        self.points.extend(points)
        self.waiting.extend(points)
        while self.waiting and (len(entries) + 1) * self.screen_s <= timeout_s:
            point = self.waiting.pop(0)
            try:
                family, source = render(problem, point)
            except ValueError as exc:
                entries.append(
                    ScreenEntry(
                        point.family, dict(point.params), "", Verdict.COMPILE_ERROR, str(exc)
                    )
                )
                continue
            cid = Candidate(source, Backend.of_family(family.backend)).id
            if cid in self.screened:
                continue
            self.screened.append(cid)
            result = self.screen_score(source)
            entry = ScreenEntry(point.family, dict(point.params), cid, Verdict.PASSED)
            if isinstance(result, Verdict):
                entry.verdict = result
            self.screened_verdicts.append(entry.verdict)
            if not isinstance(result, Verdict):
                entry.speedup, entry.noise, entry.rounds = result, self.noise, 1
                entry.median_us, entry.baseline_us = 100.0 / result, 100.0
            entries.append(entry)
        return ScreenResult(
            problem.key,
            "torch",
            self.screen_regime,
            entries,
            gpu_s=self.screen_s * len(entries),
            wall_s=self.screen_s * len(entries),
            pending=len(self.waiting),
        )

    def verify_estimate_s(self, *, full: bool) -> float:
        return self.verify_s

    def evaluate(
        self, candidate: Candidate, problem: Problem, *, timeout_s: float, full: bool = False
    ) -> Evaluation:
        self.calls.append(candidate.id)
        self.timeouts.append(timeout_s)
        time.sleep(self.wait_s)
        if full:
            self.verified.append(candidate.id)
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
                duration_s=self.verify_s,
            )
        base_us = 100.0
        stats = TimingStats(
            base_us / result, 1.0, base_us / result, base_us / result, 7, self.noise
        )
        speedups = {"torch": result}
        if full:
            speedups |= {name: result * ratio for name, ratio in self.other_baselines.items()}
        timings = Timings(self.verify_regime, "fake", stats, speedups=speedups, noise=self.noise)
        return Evaluation(
            candidate.id,
            problem.key,
            Verdict.PASSED,
            CompileResult(True),
            timings=timings,
            duration_s=self.verify_s,
        )

    def profile(self, candidate: Candidate, problem: Problem, *, timeout_s: float) -> Profile:
        self.profiled.append(candidate.id)
        n = len(self.profiled)
        return Profile(
            candidate.id, problem.key, {"sm_pct": 40.0 + n, "dram_pct": 20.0}, self.bottleneck
        )

    def prefetch(self, candidates: Sequence[Candidate], problem: Problem) -> None:
        self.prefetched.extend(c.id for c in candidates)

    def prefetch_final(self, candidate: Candidate, problem: Problem) -> None:
        # (id, evaluations before it): compiled ahead for the final verification, and when
        self.finals_ahead.append((candidate.id, len(self.calls)))

    def end_search(self) -> None:
        self.search_ended_at = len(self.calls)

    def close(self) -> None:
        return None


class ListReporter:
    """Collects events in memory; optionally also appends them as JSON lines to a file, and
    asks to cancel after a given number of iterations."""

    def __init__(self, path: Path | None = None, *, cancel_after: int | None = None) -> None:
        self.events: list[IterationEvent] = []
        self.searches: list[SearchStats] = []
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

    def search(self, stats: SearchStats) -> None:
        self.searches.append(stats)

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


def rising(step: float = 0.05) -> Callable[[str], float]:
    """A screen score that rises with every call: each round's fastest beats the best so far,
    so every round sends finalists to tier two (for tests that need many verifications)."""
    calls = [0]

    def score(source: str) -> float:
        calls[0] += 1
        return 1.0 + step * calls[0]

    return score
