"""The graph's state: plain JSON-able data, so any LangGraph checkpointer can store it.

Sources are kept only for the best candidate and for candidates waiting to be judged; the
history holds what the planner needs (what was tried, what it did); screened renders keep only
their point and numbers. The full record of every attempt, source and evaluation included,
goes to the Reporter, which is the durable log.
"""

from __future__ import annotations

import enum
from typing import Any, TypedDict


class StopReason(enum.StrEnum):
    WALL_TIME = "wall_time"
    GPU_TIME = "gpu_time"
    LLM_TOKENS = "llm_tokens"
    LLM_COST = "llm_cost"
    MAX_ATTEMPTS = "max_attempts"
    PLATEAU = "plateau"  # too many rounds in a row brought no new best
    ROOF = "roof"  # the best reached the requested % of the roof
    TARGET = "target"  # the best reached the requested speedup
    CANCELLED = "cancelled"  # reporter.cancel_requested()
    EXHAUSTED = "exhausted"  # the planner has nothing left to try
    HARNESS_ERRORS = "harness_errors"  # the harness itself failed several times in a row
    OUT_OF_REACH = "out_of_reach"  # every render screened is far behind the fastest baseline


class Tier(enum.StrEnum):
    """Which tier a candidate goes through (agents/tiers.py)."""

    SCREEN = "screen"  # tier one for renders of our families (harness/screen.py)
    VERIFY = "verify"  # a screen finalist (a render of our families): the full protocol
    CHECK = "check"  # untrusted code: the sandboxed quick protocol, then the full one if it
    # would become the best


class Record(TypedDict):
    """One judged attempt as the planner sees it (the Reporter gets the full IterationEvent)."""

    index: int
    parent: int | None
    family: str | None
    params: dict[str, Any]
    hypothesis: str
    verdict: str  # an AttemptVerdict value
    reason: str
    candidate_id: str
    tier: str  # a Tier value
    speedup: float | None  # vs config.baseline, from the full protocol (a check's: quick)
    screen_speedup: float | None  # the screen's number for it (renders only)
    median_us: float | None
    noise: float
    pct_of_roof: float | None
    gpu_s: float
    profile_delta: dict[str, float]  # metric -> change vs the parent's profile (kept ones)


class Best(TypedDict):
    """The best fully verified candidate: the only kind there is."""

    index: int
    candidate_id: str
    source: str
    family: str | None
    params: dict[str, Any]
    speedup: float
    screen_speedup: float | None
    median_us: float
    noise: float
    pct_of_roof: float | None
    speedups: dict[str, float]  # vs every baseline of its full-protocol evaluation
    evaluation: dict[str, Any]  # that evaluation (Evaluation.to_dict())


class Screened(TypedDict):
    """One render the screen looked at (harness.screen.ScreenEntry, without the detail)."""

    family: str
    params: dict[str, Any]
    candidate_id: str
    verdict: str  # a harness Verdict value
    speedup: float | None  # the screen's GPU-time ratio vs the baseline
    noise: float
    rounds: int  # successive-halving rounds it reached
    verified: int | None  # index of its full-protocol attempt, once it was a finalist
    why: str  # not passed: the detail's last line (agents.tiers.screen_why); "" when it passed


class Pending(TypedDict):
    """A candidate waiting for the judge."""

    source: str
    family: str | None
    params: dict[str, Any]
    hypothesis: str
    parent: int | None
    origin: str  # "family:<name>" or "llm:<model>"
    tier: str  # a Tier value
    screen_speedup: float | None
    llm_tokens: int  # spent producing it (planner share + coder)
    llm_cost_usd: float
    error: str  # non-empty: the coder could not produce valid code; recorded, not evaluated


class Plan(TypedDict):
    hypothesis: str
    move: str  # "screen": family renders at points; "rewrite": the coder edits the best source
    # [{"family": name, "params": {...}, "hypothesis": "why this point"}] for "screen" moves;
    # a point without its own hypothesis (an LLM plan's) takes the plan's
    points: list[dict[str, Any]]
    rewrite: str  # the code-level change requested from the LLM coder
    llm_tokens: int
    llm_cost_usd: float


class OptimizeState(TypedDict, total=False):
    problem: dict[str, Any]  # Problem.to_dict()
    history: list[Record]
    seen: dict[str, int]  # candidate_id -> index: the same source is never judged twice
    best: Best | None
    plan: Plan | None
    pending: list[Pending]
    screened: dict[str, Screened]  # ScreenPoint.key -> what the screen found
    queued: list[dict[str, Any]]  # points handed to the screen and not screened yet
    to_profile: int | None  # index of a candidate waiting for the profiler
    profiles: dict[str, dict[str, Any]]  # str(index) -> profile digest (kept ones)
    latest_profile: dict[str, Any] | None
    next_index: int
    elapsed_s: float  # wall time, accumulated across resumes
    gpu_s: float  # screen + verify + check + profile
    llm_tokens: int
    llm_cost_usd: float
    rounds_without_gain: int  # screen rounds and attempts in a row that brought no new best
    planner_steps: int
    verify_seconds: list[float]  # recent full-protocol durations: the final reserve's estimate
    stats: dict[str, Any]  # reporting.SearchStats.to_dict()
    stop_reason: str | None
    outcome: dict[str, Any] | None  # tiers.Outcome.to_dict(), set by the finish node
    notes: list[str]  # provider failures and fallbacks, for the final report
    # LLM spend of plans whose points produced no attempt yet: it travels with the next one,
    # so the events' spend adds up to the run's.
    llm_carry: list[float]  # [tokens, cost_usd]
