"""Request and response shapes of API v1 (they are the OpenAPI schema at /api/docs)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import AfterValidator, model_validator

from webapp.api.errors import ErrorCode


def _storable(value: str) -> str:
    """Text the database can hold: PostgreSQL refuses NUL, and UTF-8 has no lone surrogates."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


# Every free-text input of the API is Text, so odd characters get a 422, never a 500.
Text = Annotated[str, AfterValidator(_storable)]

# --- errors


class ErrorBody(Schema):
    code: ErrorCode
    message: str
    details: list[Any] = []


class ErrorOut(Schema):
    error: ErrorBody


# --- who am I


class TeamUsageOut(Schema):
    active_jobs: int
    max_active_jobs: int
    gpu_minutes_used: float
    gpu_minutes_reserved: float
    gpu_minutes_available: float
    gpu_minutes_quota: int
    window_days: int


class TeamOut(Schema):
    slug: str
    name: str
    usage: TeamUsageOut


class TokenOut(Schema):
    name: str
    prefix: str
    all_teams: bool
    created_at: datetime
    last_used_at: datetime | None


class MeOut(Schema):
    username: str
    token: TokenOut
    teams: list[TeamOut]


# --- jobs


class ProblemIn(Schema):
    op: Text = Field(min_length=1, max_length=40)
    shape: Text | list[int] = Field(description="e.g. '4096x4096x4096' or [4096, 4096, 4096]")
    dtype: Text = Field(min_length=1, max_length=10)
    layout: Text = Field("", max_length=20)


class JobCreateIn(Schema):
    team: Text = Field(min_length=1, max_length=90, description="The team's slug.")
    title: Text | None = Field(None, max_length=120)
    shapes: Text | None = Field(
        None,
        max_length=1_000_000,
        description="A shape set as CSV (with a header), JSON or YAML text, as on the web form.",
    )
    format: Literal["auto", "csv", "json", "yaml"] = "auto"
    problems: list[ProblemIn] | None = Field(
        None, max_length=1000, description="Instead of `shapes`: the problems as a list."
    )
    queue: Text | None = Field(None, max_length=40, description="Worker queue; default the first.")
    gpu_minutes: int | None = Field(
        None, ge=1, le=1_000_000, description="GPU-minute budget; counts against the team's quota."
    )

    @model_validator(mode="after")
    def one_source(self) -> JobCreateIn:
        if (self.shapes is None) == (self.problems is None):
            raise ValueError("give exactly one of `shapes` (text) or `problems` (a list)")
        return self


class ProblemOut(Schema):
    position: int
    key: str
    op: str
    shape: list[int]
    dtype: str
    layout: str


class TaskOut(Schema):
    id: int
    problem: str
    queue: str
    status: str
    attempt: int
    stop_reason: str
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    iterations: int
    best_speedup: float | None = Field(
        description="The best kept kernel's speedup over the fastest baseline it was timed "
        "against (the number the pages, the leaderboards and the package show)."
    )
    queue_position: int | None = Field(
        None,
        description="While queued: tasks ahead of it on its queue (running, or queued before "
        "it); a worker runs one task at a time, for every team.",
    )
    wait_estimate_s: float | None = Field(
        None,
        description="While queued: at most this many seconds before it starts (the budgets "
        "left of the tasks ahead, per running worker).",
    )


class JobOut(Schema):
    id: uuid.UUID
    title: str
    team: str
    kind: str
    status: str
    terminal: bool
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_seq: int
    gpu_minutes: int | None
    web_url: str


class FailureOut(Schema):
    stage: str = Field(
        description="Where it failed: 'profile' or 'verify' (a model job's checks, with the "
        "model's failing step in brackets, e.g. 'profile (forward)'), or 'optimize <problem>'."
    )
    message: str = Field(description="One line: what failed and the error.")
    traceback: str = Field(description="The traceback's tail, without the server's paths.")


class JobDetailOut(JobOut):
    problems: list[ProblemOut]
    tasks: list[TaskOut]
    failure: FailureOut | None = Field(
        None, description="Why the job failed (null unless its status is 'failed')."
    )


class ModelJobOut(JobDetailOut):
    submitted_jobs: list[uuid.UUID] = Field(
        description="Every job this upload made: one per model file (a .zip may hold several); "
        "the first is the one described here."
    )


class JobPage(Schema):
    count: int
    items: list[JobOut]


# --- iterations


class IterationSummaryOut(Schema):
    seq: int
    task: int
    problem: str
    index: int
    parent: int | None
    verdict: str
    verdict_label: str
    hypothesis: str
    reason: str
    candidate_id: str
    speedup: float | None = Field(
        description="Against eager PyTorch (torch), the search's baseline."
    )
    best_speedup: float | None
    fastest_speedup: float | None = Field(
        None, description="Over the fastest baseline it was timed against: the headline."
    )
    interpreter: bool = Field(description="Timed in Triton's CPU interpreter: correctness only.")
    ranked: bool = Field(
        description="A verified win on a GPU (faster than every baseline it was timed against): "
        "ranked, downloadable, substituted into a model."
    )
    elapsed_s: float
    has_profile: bool


class IterationOut(IterationSummaryOut):
    attempt: int
    family: str
    params: dict[str, Any]
    source: str
    evaluation: dict[str, Any] | None
    final_evaluation: dict[str, Any] | None = Field(
        description="The task's best re-evaluated when its run ended (full protocol, every "
        "baseline); the winner rule reads it when present."
    )
    profile: dict[str, Any] | None
    gpu_s: float
    llm_tokens: int
    llm_cost_usd: float
    created_at: datetime


class IterationPage(Schema):
    items: list[IterationSummaryOut]
    next_after: int = Field(description="Pass as `after` to get the following page.")


# --- winners and leaderboards


class WinnerOut(Schema):
    task: int
    problem: str
    seq: int
    candidate_id: str
    speedup: float = Field(description="Against eager PyTorch (the primary baseline).")
    best_baseline: str = Field(description="The fastest baseline it was timed against.")
    best_baseline_speedup: float = Field(description="Its speedup over that baseline (> 1).")
    regime: str = Field(description="How it was timed (the harness's timing regime).")
    device: dict[str, Any]
    path: str = Field(description="Where the source lies in the download's zip.")


class WinnersOut(Schema):
    job: uuid.UUID
    winners: list[WinnerOut]
    problems_without_winner: list[str]


class LeaderboardEntryOut(Schema):
    rank: int
    speedup: float = Field(
        description="Over the fastest baseline it was timed against (`baseline`), as its "
        "package reports it."
    )
    baseline: str
    job_id: uuid.UUID
    job_title: str
    team_slug: str
    team_name: str
    seq: int
    candidate_id: str
    created_at: datetime


class LeaderboardGroupOut(Schema):
    problem_key: str
    op: str
    shape: list[int]
    dtype: str
    layout: str
    device: str
    entries: list[LeaderboardEntryOut]


class LeaderboardOut(Schema):
    groups: list[LeaderboardGroupOut]
