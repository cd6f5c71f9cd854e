"""The Reporter: the only way an optimization run talks to the outside world.

workers/ implements it with Django models and the channel layer; the CLI implements it with a
progress bar and JSON lines. Agents never import either; they only see this protocol.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kernels.problem import Problem


class AttemptVerdict(enum.StrEnum):
    KEPT = "kept"  # correct and faster than the best by more than the measured noise
    REVERTED = "reverted"  # correct but not faster: best stays
    COMPILE_FAILED = "compile_failed"
    INCORRECT = "incorrect"
    CHEAT = "cheat"
    TIMEOUT = "timeout"
    CRASH = "crash"
    ERROR = "error"  # infrastructure or planner/coder failure; not a verdict on the kernel
    BASELINE = "baseline"  # the starting point every later attempt is compared with


@dataclass
class IterationEvent:
    index: int  # 0-based attempt number within the task; the resume and dedupe key
    parent: int | None  # index of the best candidate this one was derived from
    hypothesis: str  # the planner's reason in words
    source: str  # the candidate module source (the diff is taken against the parent's)
    candidate_id: str
    verdict: AttemptVerdict
    reason: str  # one line: why kept / reverted / rejected
    family: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None  # harness Evaluation.to_dict()
    speedup: float | None = None  # vs the primary baseline, None when not timed
    best_speedup: float | None = None  # best so far after this attempt
    elapsed_s: float = 0.0  # since the run started
    gpu_s: float = 0.0  # harness time spent on this attempt
    llm_tokens: int = 0
    llm_cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data


class Reporter(Protocol):
    def started(self, *, problem: Problem, budget: dict[str, Any]) -> None: ...

    def iteration(self, event: IterationEvent) -> None: ...

    def profile(self, *, index: int, profile: dict[str, Any]) -> None: ...

    def finished(self, *, best: IterationEvent | None, stop_reason: str) -> None: ...

    def failed(self, *, error: str) -> None: ...

    def cancel_requested(self) -> bool:
        """Polled between steps; True stops the run cleanly, keeping the best so far."""
        ...
