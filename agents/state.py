"""The graph's state: plain JSON-able data, so any LangGraph checkpointer can store it.

Sources are kept only for the best candidate and for candidates waiting to be judged; the
history holds what the planner needs (what was tried, what it did). The full record of every
attempt, source and evaluation included, goes to the Reporter, which is the durable log.
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
    PLATEAU = "plateau"  # too many attempts in a row were not kept
    ROOF = "roof"  # the best reached the requested % of the roof
    TARGET = "target"  # the best reached the requested speedup
    CANCELLED = "cancelled"  # reporter.cancel_requested()
    EXHAUSTED = "exhausted"  # the planner has nothing left to try
    HARNESS_ERRORS = "harness_errors"  # the harness itself failed several times in a row


class Record(TypedDict):
    """One attempt as the planner sees it (the Reporter gets the full IterationEvent)."""

    index: int
    parent: int | None
    family: str | None
    params: dict[str, Any]
    hypothesis: str
    verdict: str  # an AttemptVerdict value
    reason: str
    candidate_id: str
    speedup: float | None  # vs config.baseline
    median_us: float | None
    noise: float
    pct_of_roof: float | None
    gpu_s: float
    profile_delta: dict[str, float]  # metric -> change vs the parent's profile (kept ones)


class Best(TypedDict):
    index: int
    candidate_id: str
    source: str
    family: str | None
    params: dict[str, Any]
    speedup: float
    median_us: float
    noise: float
    pct_of_roof: float | None
    evaluation: dict[str, Any]


class Pending(TypedDict):
    """A candidate the coder produced and the judge has not evaluated yet."""

    source: str
    family: str | None
    params: dict[str, Any]
    hypothesis: str
    parent: int | None
    origin: str  # "family:<name>" or "llm:<model>"
    llm_tokens: int  # spent producing it (planner share + coder)
    llm_cost_usd: float
    error: str  # non-empty: the coder could not produce valid code; recorded, not evaluated


class Plan(TypedDict):
    hypothesis: str
    move: str  # "params": render families at points; "rewrite": the coder edits the best source
    # [{"family": name, "params": {...}, "hypothesis": "why this point"}] for "params" moves;
    # a point without its own hypothesis (an LLM plan's) takes the plan's
    points: list[dict[str, Any]]
    rewrite: str  # the code-level change requested from the LLM coder
    llm_tokens: int
    llm_cost_usd: float


class OptimizeState(TypedDict, total=False):
    problem: dict[str, Any]  # Problem.to_dict()
    history: list[Record]
    seen: dict[str, int]  # candidate_id -> index: the same source is never evaluated twice
    best: Best | None
    plan: Plan | None
    pending: list[Pending]
    to_profile: int | None  # index of a candidate waiting for the profiler
    profiles: dict[str, dict[str, Any]]  # str(index) -> profile digest (baseline + kept)
    latest_profile: dict[str, Any] | None
    next_index: int
    elapsed_s: float  # wall time, accumulated across resumes
    gpu_s: float
    llm_tokens: int
    llm_cost_usd: float
    not_kept_in_row: int
    planner_steps: int
    eval_seconds: list[float]  # recent harness durations, to avoid starting one past the cap
    stop_reason: str | None
    final: dict[str, Any] | None  # the best's full-protocol re-evaluation (verify node)
    notes: list[str]  # provider failures and fallbacks, for the final report
