"""One judged attempt, built once by the judge; the event, the history entry and the best are
derived from it (and nothing else builds them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.reporting import AttemptVerdict, IterationEvent
from agents.state import Best, Pending, Record
from harness.judge import wins
from harness.results import Evaluation


@dataclass
class Attempt:
    index: int
    item: Pending  # what the judge was given (source, family, point, hypothesis, tier, spend)
    candidate_id: str
    verdict: AttemptVerdict
    reason: str
    evaluation: Evaluation | None  # the deciding one: full protocol for a verification
    speedup: float | None  # vs config.baseline, from that evaluation
    best_speedup: float | None  # the best's after this attempt
    gpu_s: float  # harness time: the check and the verification together
    elapsed_s: float

    @property
    def kept(self) -> bool:
        return self.verdict is AttemptVerdict.KEPT

    def _timing(self) -> tuple[float | None, float]:
        timings = self.evaluation.timings if self.evaluation is not None else None
        return (timings.candidate.median_us, timings.noise) if timings else (None, 0.0)

    def event(self) -> IterationEvent:
        item = self.item
        return IterationEvent(
            index=self.index,
            parent=item["parent"],
            hypothesis=item["hypothesis"],
            source=item["source"],
            candidate_id=self.candidate_id,
            verdict=self.verdict,
            reason=self.reason,
            family=item["family"],
            params=dict(item["params"]),
            evaluation=self.evaluation.to_dict() if self.evaluation is not None else None,
            speedup=self.speedup,
            best_speedup=self.best_speedup,
            elapsed_s=self.elapsed_s,
            gpu_s=self.gpu_s,
            llm_tokens=item["llm_tokens"],
            llm_cost_usd=item["llm_cost_usd"],
            tier=item["tier"],
            screen_speedup=item["screen_speedup"],
            beats_baselines=wins.of_timings(
                self.evaluation.timings if self.evaluation is not None else None
            ).beats,
        )

    def record(self) -> Record:
        median_us, noise = self._timing()
        item = self.item
        return Record(
            index=self.index,
            parent=item["parent"],
            family=item["family"],
            params=dict(item["params"]),
            hypothesis=item["hypothesis"],
            verdict=self.verdict.value,
            reason=self.reason,
            candidate_id=self.candidate_id,
            tier=item["tier"],
            speedup=self.speedup,
            screen_speedup=item["screen_speedup"],
            median_us=median_us,
            noise=noise,
            pct_of_roof=self.evaluation.pct_of_roof if self.evaluation is not None else None,
            gpu_s=self.gpu_s,
            profile_delta={},
        )

    def best(self) -> Best:
        """Only a kept attempt is a best: it passed the full protocol (agents/tiers.py)."""
        assert self.kept and self.evaluation is not None and self.speedup is not None
        median_us, noise = self._timing()
        assert median_us is not None
        timings = self.evaluation.timings
        speedups: dict[str, Any] = dict(timings.speedups) if timings else {}
        return Best(
            index=self.index,
            candidate_id=self.candidate_id,
            source=self.item["source"],
            family=self.item["family"],
            params=dict(self.item["params"]),
            speedup=self.speedup,
            screen_speedup=self.item["screen_speedup"],
            median_us=median_us,
            noise=noise,
            pct_of_roof=self.evaluation.pct_of_roof,
            speedups=speedups,
            evaluation=self.evaluation.to_dict(),
        )
