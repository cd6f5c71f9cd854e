"""Reads for the API, always narrowed to a Principal's teams; reusable by the dashboard.

A Principal is a token's view of the world: its user's current memberships, cut down to the
token's teams when it was made for some teams only. Everything here starts from the jobs
selector of webapp.jobs (the same team isolation as the web pages) and narrows it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from webapp.accounts.models import Membership, Team
from webapp.api.models import ApiToken, JobBudget
from webapp.jobs import selectors as job_selectors
from webapp.jobs.models import Iteration, Job, Task


@dataclass(frozen=True)
class Principal:
    user: AbstractBaseUser
    token: ApiToken
    team_ids: frozenset[int]  # teams this request may see: memberships within the token's scope


def tokens_for_user(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).prefetch_related("teams").order_by("-created_at")


def principal_for_token(*, token: ApiToken) -> Principal:
    member_of = Membership.objects.filter(user_id=token.user_id).values_list("team_id", flat=True)
    team_ids = set(member_of)
    if not token.all_teams:
        team_ids &= set(token.teams.values_list("id", flat=True))
    return Principal(user=token.user, token=token, team_ids=frozenset(team_ids))


def teams_for_principal(*, principal: Principal) -> QuerySet[Team]:
    return Team.objects.filter(id__in=principal.team_ids).order_by("name")


def jobs_for_principal(*, principal: Principal) -> QuerySet[Job]:
    return job_selectors.job_list_for_user(user=principal.user).filter(
        team_id__in=principal.team_ids
    )


def job_for_principal(*, principal: Principal, job_id: uuid.UUID | str) -> Job | None:
    job = job_selectors.job_get_for_user(user=principal.user, job_id=job_id)
    return job if job is not None and job.team_id in principal.team_ids else None


def iteration_detail(*, job: Job, seq: int) -> Iteration | None:
    return Iteration.objects.filter(job=job, seq=seq).select_related("task__problem").first()


def task_detail(*, job: Job, task_id: int) -> Task | None:
    return Task.objects.filter(job=job, id=task_id).select_related("problem").first()


# --- Winners and leaderboards ---------------------------------------------------------------


def _device(evaluation: dict[str, Any] | None) -> dict[str, Any]:
    device = (evaluation or {}).get("device")
    return device if isinstance(device, dict) else {}


def is_interpreter_result(evaluation: dict[str, Any] | None) -> bool:
    """Triton-interpreter timings are CPU emulation: labelled, downloadable, never ranked."""
    timings = (evaluation or {}).get("timings")
    regime = timings.get("regime") if isinstance(timings, dict) else None
    return regime == "interpreter" or _device(evaluation).get("kind") == "interpreter"


def interpreter_result_q() -> Q:
    """is_interpreter_result as a filter on Iteration rows (the same rule, in SQL)."""
    return Q(evaluation__timings__regime="interpreter") | Q(evaluation__device__kind="interpreter")


def kept_iterations() -> QuerySet[Iteration]:
    """Verified wins: kept by the judge, timed, and not flagged as physically implausible."""
    return (
        Iteration.objects.filter(verdict=Iteration.Verdict.KEPT, speedup__isnull=False)
        .exclude(evaluation__implausible=True)
        .select_related("task__problem", "job__team")
    )


def ranked_iterations(*, jobs: QuerySet[Job]) -> QuerySet[Iteration]:
    """Kept iterations that may appear on a leaderboard: measured on a real device, not emulated."""
    return (
        kept_iterations()
        .filter(job__in=jobs, evaluation__device__kind__isnull=False)
        .exclude(evaluation__device__kind="interpreter")
        .exclude(Q(evaluation__timings__regime="interpreter"))
    )


@dataclass(frozen=True)
class Winner:
    """The best kept iteration of one task of a job."""

    task: Task
    iteration: Iteration

    @property
    def interpreter(self) -> bool:
        return is_interpreter_result(self.iteration.evaluation)


def job_winners(*, job: Job) -> list[Winner]:
    """Per task, the kept iteration with the highest speedup (the earliest on a tie)."""
    best: dict[int, Iteration] = {}
    for it in kept_iterations().filter(job=job).order_by("-speedup", "seq"):
        best.setdefault(it.task_id, it)
    return [
        Winner(task=it.task, iteration=it) for it in sorted(best.values(), key=lambda i: i.task_id)
    ]


@dataclass(frozen=True)
class LeaderboardEntry:
    rank: int
    speedup: float
    job_id: uuid.UUID
    job_title: str
    team_slug: str
    team_name: str
    seq: int
    candidate_id: str
    created_at: datetime


@dataclass(frozen=True)
class LeaderboardGroup:
    problem_key: str
    op: str
    shape: list[int]
    dtype: str
    layout: str
    device: str
    entries: list[LeaderboardEntry]


def leaderboard(
    *,
    jobs: QuerySet[Job],
    op: str | None = None,
    dtype: str | None = None,
    device: str | None = None,
    per_group: int = 10,
) -> list[LeaderboardGroup]:
    """Per (problem key, device name): each job's best ranked iteration, best speedup first.

    `jobs` decides who is on the board (the API passes the caller's teams' jobs; a public
    board would pass another queryset), so isolation stays the caller's choice.
    """
    rows = ranked_iterations(jobs=jobs)
    if op:
        rows = rows.filter(task__problem__op=op)
    if dtype:
        rows = rows.filter(task__problem__dtype=dtype)
    if device:
        rows = rows.filter(evaluation__device__name=device)
    rows = rows.defer("source", "profile").order_by("-speedup", "seq")

    groups: dict[tuple[str, str], list[Iteration]] = {}
    seen: set[tuple[str, str, uuid.UUID]] = set()
    for it in rows:
        key = (it.task.problem.key, str(_device(it.evaluation).get("name", "")))
        if (*key, it.job_id) in seen:
            continue  # one entry per job: its best
        seen.add((*key, it.job_id))
        groups.setdefault(key, []).append(it)

    result = []
    for (problem_key, device_name), its in sorted(groups.items()):
        problem = its[0].task.problem
        entries = [
            LeaderboardEntry(
                rank=rank,
                speedup=it.speedup,
                job_id=it.job_id,
                job_title=it.job.title,
                team_slug=it.job.team.slug,
                team_name=it.job.team.name,
                seq=it.seq,
                candidate_id=it.candidate_id,
                created_at=it.created_at,
            )
            for rank, it in enumerate(its[:per_group], start=1)
        ]
        result.append(
            LeaderboardGroup(
                problem_key=problem_key,
                op=problem.op,
                shape=list(problem.shape),
                dtype=problem.dtype,
                layout=problem.layout,
                device=device_name,
                entries=entries,
            )
        )
    return result


def task_gpu_budget_s(*, task_id: int, default_minutes: int) -> float:
    """A task's share of its job's GPU budget: the job's minutes split evenly over its tasks.

    Jobs submitted without a budget (the web form today) get the default per job.
    """
    task = Task.objects.select_related("job").get(id=task_id)
    minutes = (
        JobBudget.objects.filter(job_id=task.job_id).values_list("gpu_minutes", flat=True).first()
    )
    n_tasks = Task.objects.filter(job_id=task.job_id).count() or 1
    return (minutes if minutes is not None else default_minutes) * 60.0 / n_tasks
