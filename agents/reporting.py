"""The Reporter: the only way an optimization run talks to the outside world.

workers/ implements it with Django models and the channel layer; the CLI implements it with a
progress bar and JSON lines. Agents never import either; they only see this protocol.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from harness.results import Verdict
from kernels.problem import Problem


class AttemptVerdict(enum.StrEnum):
    """What the judge decided about one attempt.

    The judge's own outcomes first; then one member per harness verdict other than PASSED,
    under the harness's name (harness.results.Verdict is the one definition of what can go
    wrong; `of` maps by name). Values are what the database stores (webapp's Iteration.Verdict
    mirrors them); two keep the spelling they were first stored under.
    """

    KEPT = "kept"  # fully verified and faster than the best by more than the measured noise
    REVERTED = "reverted"  # correct but not faster: best stays
    BASELINE = "baseline"  # the stand-in's reference step (agents/standin.py)
    COMPILE_ERROR = "compile_failed"
    INCORRECT = Verdict.INCORRECT.value
    CHEAT = Verdict.CHEAT.value
    TIMEOUT = Verdict.TIMEOUT.value
    CRASH = Verdict.CRASH.value
    INFRA_ERROR = "error"  # infrastructure or planner/coder failure; not a verdict on the kernel

    @classmethod
    def of(cls, verdict: Verdict) -> AttemptVerdict:
        """The attempt verdict of a harness verdict that is not PASSED."""
        return cls[verdict.name]


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
    tier: str = "verify"  # "verify": a screen finalist; "check": untrusted code (agents/tiers.py)
    screen_speedup: float | None = None  # the screen's number that made it a finalist
    # harness.judge.wins on `evaluation`: every baseline timed is beaten beyond noise. The worker
    # stores it (Iteration.beats_baselines); the web app ranks by it and never recomputes it.
    beats_baselines: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data


@dataclass
class TierStats:
    """One tier of the search: how many candidates went through it and the GPU time it took."""

    candidates: int = 0
    passed: int = 0
    gpu_s: float = 0.0

    @property
    def per_gpu_hour(self) -> float | None:
        return self.candidates / (self.gpu_s / 3600.0) if self.gpu_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_gpu_hour": self.per_gpu_hour}


@dataclass(frozen=True)
class FinalStep:
    """How the search ended, to read where a run's last minute went: when it stopped, what it
    had kept back for its final verification, what that verification was given and took, and
    how many the finish ran in all.
    Two of 16 tasks on 4x H200 lost their final verification to its deadline with no way to
    tell the search's overrun from the compile-ahead wait (results/worker_scaling_h200x4_together.json)."""

    stopped_s: float  # run time when the search stopped
    reserve_s: float  # kept back for the finish's verifications at that moment
    timeout_s: float = 0.0  # given to the last verification (0: none ran)
    wall_s: float = 0.0  # its evaluate() call, the wait for its compile ahead included
    harness_s: float = 0.0  # the harness's own duration of it
    verdict: str = ""  # the harness's verdict, or why none ran
    verified: int = 0  # verifications the finish ran: that one, then near ties in the time left

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FinalStep:
        return cls(
            stopped_s=float(data.get("stopped_s", 0.0)),
            reserve_s=float(data.get("reserve_s", 0.0)),
            timeout_s=float(data.get("timeout_s", 0.0)),
            wall_s=float(data.get("wall_s", 0.0)),
            harness_s=float(data.get("harness_s", 0.0)),
            verdict=str(data.get("verdict", "")),
            verified=int(data.get("verified", 0)),
        )


@dataclass
class SearchStats:
    """Where a run stands: screened vs fully verified, each tier's throughput, where the time
    went. Sent after every screen round and verification, and once more at the end."""

    screen: TierStats = field(default_factory=TierStats)  # renders of our families, batched
    verify: TierStats = field(default_factory=TierStats)  # the full protocol (finalists)
    check: TierStats = field(default_factory=TierStats)  # untrusted code's sandboxed quick check
    compile_s: float = 0.0  # compile children's time, summed (CPU cores, alongside the GPU)
    compile_wait_s: float = 0.0  # the screen waited this long for compiles
    profile_s: float = 0.0
    elapsed_s: float = 0.0
    pending_compile: int = 0
    # What the screen saw of each family: renders screened, passed, the best screened speedup
    # (why a family never reached tier two is read here).
    families: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcome: str = ""  # at the end: "verified" (a verified best beats every baseline) or "baseline"
    outcome_reason: str = ""
    final: FinalStep | None = None  # at the end

    def time_breakdown(self) -> dict[str, float]:
        """Seconds per kind of work; compiling runs on the CPU alongside the rest."""
        return {
            "compile": round(self.compile_s, 2),
            "compile_wait": round(self.compile_wait_s, 2),
            "screen": round(self.screen.gpu_s, 2),
            "verify": round(self.verify.gpu_s + self.check.gpu_s, 2),
            "profile": round(self.profile_s, 2),
            "wall": round(self.elapsed_s, 2),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "screened": self.screen.candidates,
            "fully_verified": self.verify.candidates,
            "checked": self.check.candidates,
            "tiers": {
                "screen": self.screen.to_dict(),
                "verify": self.verify.to_dict(),
                "check": self.check.to_dict(),
            },
            "time_s": self.time_breakdown(),
            "pending_compile": self.pending_compile,
            "families": self.families,
            "outcome": self.outcome,
            "outcome_reason": self.outcome_reason,
            "final": asdict(self.final) if self.final else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchStats:
        tiers = data.get("tiers") or {}
        times = data.get("time_s") or {}

        def tier(name: str) -> TierStats:
            t = tiers.get(name) or {}
            return TierStats(
                int(t.get("candidates", 0)), int(t.get("passed", 0)), float(t.get("gpu_s", 0.0))
            )

        return cls(
            screen=tier("screen"),
            verify=tier("verify"),
            check=tier("check"),
            compile_s=float(times.get("compile", 0.0)),
            compile_wait_s=float(times.get("compile_wait", 0.0)),
            profile_s=float(times.get("profile", 0.0)),
            elapsed_s=float(times.get("wall", 0.0)),
            pending_compile=int(data.get("pending_compile", 0)),
            families=dict(data.get("families") or {}),
            outcome=str(data.get("outcome", "")),
            outcome_reason=str(data.get("outcome_reason", "")),
            final=FinalStep.from_dict(data["final"]) if data.get("final") else None,
        )


class Reporter(Protocol):
    def started(self, *, problem: Problem, budget: dict[str, Any]) -> None: ...

    def iteration(self, event: IterationEvent) -> None: ...

    def search(self, stats: SearchStats) -> None:
        """Screened vs verified counts, per-tier throughput, time breakdown (may repeat)."""
        ...

    def profile(self, *, index: int, profile: dict[str, Any]) -> None: ...

    def finished(self, *, best: IterationEvent | None, stop_reason: str) -> None: ...

    def failed(self, *, error: str) -> None: ...

    def cancel_requested(self) -> bool:
        """Polled between steps; True stops the run cleanly, keeping the best so far."""
        ...
