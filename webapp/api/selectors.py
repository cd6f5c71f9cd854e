"""Reads for the API, always narrowed to a Principal's teams; reusable by the dashboard.

A Principal is a token's view of the world: its user's current memberships, cut down to the
token's teams when it was made for some teams only. Everything here starts from the jobs
selector of webapp.jobs (the same team isolation as the web pages) and narrows it. The
domain rules (winners, what is ranked) are webapp.jobs.selectors'; the leaderboard is the
pages' table (webapp.dashboard.selectors.leaderboard).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from webapp.accounts.models import Membership, Team
from webapp.api.models import ApiToken
from webapp.jobs import selectors as job_selectors
from webapp.jobs.models import Iteration, Job


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
