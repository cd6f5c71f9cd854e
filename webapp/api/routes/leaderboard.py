"""Leaderboards over the token's teams: the pages' table (one entry per team, its best)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from django.http import HttpRequest
from ninja import Query, Router

from webapp.api import selectors
from webapp.api.routes.common import ERRORS, principal
from webapp.api.schemas import LeaderboardOut, Text
from webapp.dashboard.selectors import BoardFilters, leaderboard_groups

router = Router(tags=["leaderboards"])


@router.get("/leaderboard", response={200: LeaderboardOut, **ERRORS}, summary="Leaderboards")
def leaderboard(
    request: HttpRequest,
    op: Annotated[Text | None, Query(max_length=40)] = None,
    dtype: Annotated[Text | None, Query(max_length=10)] = None,
    device: Annotated[Text | None, Query(max_length=200, description="GPU name")] = None,
    team: Annotated[Text | None, Query(max_length=90, description="A team's slug")] = None,
    per_group: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict:
    """Per problem key and GPU, each team's best verified win, best first: the same table the
    leaderboard pages show. Only kernels faster than every baseline on a GPU are ranked; results
    timed in the Triton interpreter (CPU) and results flagged implausible never are.
    """
    jobs = selectors.jobs_for_principal(principal=principal(request))
    if team:
        jobs = jobs.filter(team__slug=team)
    filters = BoardFilters(op=op or "", dtype=dtype or "", device=device or "")
    groups = leaderboard_groups(jobs=jobs, filters=filters, per_group=per_group)
    return {"groups": [asdict(g) for g in groups]}
